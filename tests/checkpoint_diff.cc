// checkpoint_diff A B: whether two shard checkpoint files
// (common/wire/checkpoint.h) hold the same model state bit for bit: the
// same version, shard and layout; every dense range (by tensor and offset)
// with equal weights, optimizer slots and step count; every sparse table
// (by name) with the same keys and, per key, equal step count and values
// (weights, then slots). Floats are compared as their bit patterns, so
// -0 differs from 0 and a NaN equals only the same NaN. The job id and the
// spec are not compared (two clusters number their jobs alike or not).
//
// Prints one line "equal: shard I of N, version V: ranges=... weights=...
// slots=... rows=... row_values=... steps=... floats=..." (what was
// compared: dense ranges, their weights and slot values, sparse rows, their
// values, step counts, all floats) and exits 0, or the first differences
// and exits 1; 2 when a file cannot be read.
// A test-only tool of replica_bitexact_test.sh.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/platform/file_system.h"
#include "common/wire/checkpoint.h"

namespace ps {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// Counts what was compared and keeps the first differences.
class Diff {
 public:
  void Note(const std::string& what) {
    if (++differences_ <= kShown) std::printf("differ: %s\n", what.c_str());
  }
  // Compares `a` and `b` element by element as bits; `what` names them.
  void Floats(const std::string& what, const float* a, const float* b,
              size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (Bits(a[i]) != Bits(b[i])) {
        Note(absl::StrCat(what, "[", i, "]: ", a[i], " vs ", b[i], " (bits ",
                          absl::Hex(Bits(a[i]), absl::kZeroPad8), " vs ",
                          absl::Hex(Bits(b[i]), absl::kZeroPad8), ")"));
      }
    }
    floats_ += n;
  }
  void Steps(const std::string& what, int64_t a, int64_t b) {
    if (a != b) Note(absl::StrCat(what, " steps: ", a, " vs ", b));
    ++steps_;
  }
  int64_t differences() const { return differences_; }
  int64_t floats() const { return floats_; }
  int64_t steps() const { return steps_; }

 private:
  static constexpr int64_t kShown = 20;
  int64_t differences_ = 0;
  int64_t floats_ = 0;
  int64_t steps_ = 0;
};

using RangeKey = std::pair<std::string, int64_t>;

std::map<RangeKey, const CheckpointRange*> RangesOf(const CheckpointData& d) {
  std::map<RangeKey, const CheckpointRange*> out;
  for (const CheckpointRange& r : d.ranges) {
    out[{r.tensor_name, r.offset}] = &r;
  }
  return out;
}

// Row index by key.
std::map<uint64_t, size_t> RowsOf(const CheckpointSparseTable& t) {
  std::map<uint64_t, size_t> out;
  for (size_t i = 0; i < t.keys.size(); ++i) out[t.keys[i]] = i;
  return out;
}

int Compare(const CheckpointData& a, const CheckpointData& b) {
  Diff diff;
  if (a.version != b.version) {
    diff.Note(absl::StrCat("version ", a.version, " vs ", b.version));
  }
  if (a.shard_index != b.shard_index || a.num_shards != b.num_shards) {
    diff.Note(absl::StrCat("shard ", a.shard_index, " of ", a.num_shards,
                           " vs ", b.shard_index, " of ", b.num_shards));
  }

  // Dense ranges.
  const auto ra = RangesOf(a), rb = RangesOf(b);
  int64_t ranges = 0, dense_weights = 0, dense_slots = 0;
  for (const auto& [key, r] : ra) {
    const std::string name = absl::StrCat(key.first, "@", key.second);
    auto it = rb.find(key);
    if (it == rb.end()) {
      diff.Note(absl::StrCat("range ", name, " only in the first file"));
      continue;
    }
    const CheckpointRange& s = *it->second;
    ++ranges;
    diff.Steps(name, r->steps, s.steps);
    const std::tuple<const char*, const std::vector<float>*,
                     const std::vector<float>*>
        parts[] = {{"weights", &r->weights, &s.weights},
                   {"slot1", &r->slot1, &s.slot1},
                   {"slot2", &r->slot2, &s.slot2}};
    for (const auto& [part, x, y] : parts) {
      if (x->size() != y->size()) {
        diff.Note(absl::StrCat(name, " ", part, ": ", x->size(), " vs ",
                               y->size(), " values"));
        continue;
      }
      diff.Floats(absl::StrCat(name, " ", part), x->data(), y->data(),
                  x->size());
      (std::strcmp(part, "weights") == 0 ? dense_weights : dense_slots) +=
          x->size();
    }
  }
  for (const auto& [key, r] : rb) {
    if (!ra.contains(key)) {
      diff.Note(absl::StrCat("range ", key.first, "@", key.second,
                             " only in the second file"));
    }
  }

  // Sparse tables, row by row in key order.
  int64_t rows = 0, row_values = 0;
  std::map<std::string, const CheckpointSparseTable*> tb;
  for (const CheckpointSparseTable& t : b.sparse_tables) tb[t.name] = &t;
  if (a.sparse_tables.size() != b.sparse_tables.size()) {
    diff.Note(absl::StrCat(a.sparse_tables.size(), " vs ",
                           b.sparse_tables.size(), " sparse tables"));
  }
  for (const CheckpointSparseTable& t : a.sparse_tables) {
    auto it = tb.find(t.name);
    if (it == tb.end()) {
      diff.Note(absl::StrCat("table ", t.name, " only in the first file"));
      continue;
    }
    const CheckpointSparseTable& u = *it->second;
    if (t.row_floats != u.row_floats) {
      diff.Note(absl::StrCat("table ", t.name, ": ", t.row_floats, " vs ",
                             u.row_floats, " floats per row"));
      continue;
    }
    if (t.keys.size() != u.keys.size()) {
      diff.Note(absl::StrCat("table ", t.name, ": ", t.keys.size(), " vs ",
                             u.keys.size(), " rows"));
    }
    const auto ka = RowsOf(t), kb = RowsOf(u);
    for (const auto& [key, i] : ka) {
      const std::string name = absl::StrCat(t.name, "[key ", key, "]");
      auto j = kb.find(key);
      if (j == kb.end()) {
        diff.Note(absl::StrCat(name, " only in the first file"));
        continue;
      }
      ++rows;
      diff.Steps(name, t.steps[i], u.steps[j->second]);
      diff.Floats(name, &t.values[i * t.row_floats],
                  &u.values[j->second * u.row_floats], t.row_floats);
      row_values += t.row_floats;
    }
    for (const auto& [key, i] : kb) {
      if (!ka.contains(key)) {
        diff.Note(
            absl::StrCat(t.name, "[key ", key, "] only in the second file"));
      }
    }
  }

  if (diff.differences() > 0) {
    std::printf(
        "DIFFERENT: %lld differences (shard %d, version %lld vs %lld)\n",
        static_cast<long long>(diff.differences()), a.shard_index,
        static_cast<long long>(a.version), static_cast<long long>(b.version));
    return 1;
  }
  std::printf(
      "equal: shard %d of %d, version %lld: ranges=%lld weights=%lld "
      "slots=%lld rows=%lld row_values=%lld steps=%lld floats=%lld\n",
      a.shard_index, a.num_shards, static_cast<long long>(a.version),
      static_cast<long long>(ranges), static_cast<long long>(dense_weights),
      static_cast<long long>(dense_slots), static_cast<long long>(rows),
      static_cast<long long>(row_values), static_cast<long long>(diff.steps()),
      static_cast<long long>(diff.floats()));
  return 0;
}

}  // namespace
}  // namespace ps

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s A.psckpt B.psckpt\n", argv[0]);
    return 2;
  }
  absl::StatusOr<ps::CheckpointData> a =
      ps::ReadCheckpoint(ps::FileSystem::Posix(), argv[1]);
  absl::StatusOr<ps::CheckpointData> b =
      ps::ReadCheckpoint(ps::FileSystem::Posix(), argv[2]);
  for (const auto* d : {&a, &b}) {
    if (!d->ok()) {
      std::fprintf(stderr, "%s\n", d->status().ToString().c_str());
      return 2;
    }
  }
  return ps::Compare(*a, *b);
}
