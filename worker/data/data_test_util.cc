#include "worker/data/data_test_util.h"

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace ps::worker::data::testing {

std::string Gzip(absl::string_view bytes) {
  z_stream stream{};
  // windowBits 15 + 16: a gzip header and trailer rather than zlib's.
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return "";
  }
  std::string out(deflateBound(&stream, bytes.size()) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

absl::Status WriteFile(const std::string& path, absl::string_view bytes) {
  FILE* file = fopen(path.c_str(), "wb");
  if (file == nullptr) return absl::InternalError("cannot create " + path);
  const bool ok = fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  if (fclose(file) != 0 || !ok) {
    return absl::InternalError("cannot write " + path);
  }
  return absl::OkStatus();
}

std::string TempPath(absl::string_view name) {
  static std::atomic<int> counter{0};
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", getpid(), "_",
                      counter++, "_", name);
}

std::string ExampleString(const Batch& batch, int b) {
  std::string out;
  if (batch.label_kind == LabelKind::kFloat) {
    absl::StrAppend(&out, "y=", batch.labels[b]);
  } else if (batch.label_kind == LabelKind::kClass) {
    absl::StrAppend(&out, "c=", batch.classes[b]);
  }
  if (batch.dense_dim > 0) {
    absl::StrAppend(&out, " d=", absl::StrJoin(batch.dense_row(b), ","));
  }
  for (const SparseField& field : batch.sparse) {
    absl::StrAppend(&out, " ", field.name, "=");
    for (int32_t p = field.offsets[b]; p < field.offsets[b + 1]; ++p) {
      absl::StrAppend(&out, p > field.offsets[b] ? "," : "", field.keys[p]);
      if (!field.weights.empty()) absl::StrAppend(&out, ":", field.weights[p]);
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadAll(BatchReader& reader,
                                                 int batch_size) {
  std::vector<std::string> out;
  int64_t expected_first = reader.position();
  for (;;) {
    absl::StatusOr<Batch> batch = reader.Next(batch_size);
    if (!batch.ok()) return batch.status();
    absl::Status valid = ValidateBatch(*batch, reader.schema());
    if (!valid.ok()) return valid;
    if (batch->first_example != expected_first) {
      return absl::InternalError(absl::StrCat("batch starts at ",
                                              batch->first_example,
                                              ", expected ", expected_first));
    }
    if (batch->size > batch_size) {
      return absl::InternalError("batch larger than asked");
    }
    expected_first += batch->size;
    if (reader.position() != expected_first) {
      return absl::InternalError("position() does not follow the batches");
    }
    if (batch->size == 0) return out;
    for (int b = 0; b < batch->size; ++b) {
      out.push_back(ExampleString(*batch, b));
    }
  }
}

}  // namespace ps::worker::data::testing
