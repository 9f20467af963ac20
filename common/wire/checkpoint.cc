#include "common/wire/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/platform/status.h"

namespace ps {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'C', 'K', 'P', 'T', '0', '1'};
constexpr char kSparseMagic[8] = {'P', 'S', 'S', 'P', 'A', 'R', 'S', 'E'};
constexpr char kEndMagic[8] = {'P', 'S', 'C', 'K', 'E', 'N', 'D', '1'};

uint32_t Crc(const char* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large ranges in pieces.
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), piece);
    data += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(crc);
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void PutBytes(std::string* out, const std::string& s) {
  Put<uint32_t>(out, s.size());
  out->append(s);
}
void PutFloats(std::string* out, const std::vector<float>& v) {
  out->append(reinterpret_cast<const char*>(v.data()),
              v.size() * sizeof(float));
}

// Bounds-checked reader over the file contents.
class Reader {
 public:
  Reader(const std::string& data, const std::string& path)
      : data_(data), path_(path) {}
  template <typename T>
  absl::Status Get(T* v) {
    PS_RETURN_IF_ERROR(Need(sizeof(T)));
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status GetBytes(std::string* s) {
    uint32_t n;
    PS_RETURN_IF_ERROR(Get(&n));
    PS_RETURN_IF_ERROR(Need(n));
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  absl::Status GetFloats(int64_t n, std::vector<float>* v) {
    if (n < 0 || n > static_cast<int64_t>(data_.size())) return Truncated();
    PS_RETURN_IF_ERROR(Need(n * sizeof(float)));
    v->resize(n);
    // An empty table's vector may have no storage: memcpy takes no null.
    if (n > 0) std::memcpy(v->data(), data_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return absl::OkStatus();
  }
  size_t pos() const { return pos_; }
  absl::Status Truncated() const {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path_, " is truncated or malformed at byte ", pos_));
  }

 private:
  absl::Status Need(size_t n) const {
    return n > data_.size() - pos_ ? Truncated() : absl::OkStatus();
  }
  const std::string& data_;
  const std::string& path_;
  size_t pos_ = 0;
};

struct FileName {
  int64_t version = 0;
  int shard = 0;
  int num_shards = 0;
};

bool ParseName(const std::string& name, FileName* f) {
  long long v = 0;
  int s = 0, n = 0;
  char tail[16] = {0};
  if (std::sscanf(name.c_str(), "ckpt-v%lld-s%d-of-%d.%15s", &v, &s, &n,
                  tail) != 4) {
    return false;
  }
  if (std::string(tail) != "psckpt" || v < 0 || n < 1 || s < 0 || s >= n) {
    return false;
  }
  f->version = v;
  f->shard = s;
  f->num_shards = n;
  return true;
}

std::string MakeName(int64_t version, int shard, int num_shards) {
  return absl::StrFormat("ckpt-v%020d-s%d-of-%d.psckpt", version, shard,
                         num_shards);
}

// The entries of `dir`; none when it cannot be listed (absent: no
// checkpoints yet).
std::vector<std::string> Names(FileSystem* fs, const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = fs->ListDir(dir);
  return names.ok() ? *std::move(names) : std::vector<std::string>();
}

}  // namespace

std::string EncodeCheckpoint(const CheckpointData& data) {
  std::string out(kMagic, sizeof(kMagic));
  std::string header;
  PutBytes(&header, data.job_id);
  PutBytes(&header, data.spec.SerializeAsString());
  Put<int64_t>(&header, data.version);
  Put<int32_t>(&header, data.shard_index);
  Put<int32_t>(&header, data.num_shards);
  Put<uint32_t>(&header, data.ranges.size());
  out += header;
  Put<uint32_t>(&out, Crc(header.data(), header.size()));
  for (const CheckpointRange& r : data.ranges) {
    const size_t start = out.size();
    PutBytes(&out, r.tensor_name);
    Put<int64_t>(&out, r.offset);
    Put<int64_t>(&out, r.weights.size());
    Put<int64_t>(&out, r.steps);
    Put<uint8_t>(&out, r.slot1.empty() ? 0 : 1);
    Put<uint8_t>(&out, r.slot2.empty() ? 0 : 1);
    PutFloats(&out, r.weights);
    if (!r.slot1.empty()) PutFloats(&out, r.slot1);
    if (!r.slot2.empty()) PutFloats(&out, r.slot2);
    Put<uint32_t>(&out, Crc(out.data() + start, out.size() - start));
  }
  if (!data.sparse_tables.empty()) {
    out.append(kSparseMagic, sizeof(kSparseMagic));
    Put<uint32_t>(&out, data.sparse_tables.size());
    for (const CheckpointSparseTable& t : data.sparse_tables) {
      const size_t start = out.size();
      PutBytes(&out, t.name);
      Put<int32_t>(&out, t.row_floats);
      Put<int64_t>(&out, t.keys.size());
      out.append(reinterpret_cast<const char*>(t.keys.data()),
                 t.keys.size() * sizeof(uint64_t));
      out.append(reinterpret_cast<const char*>(t.steps.data()),
                 t.steps.size() * sizeof(uint32_t));
      PutFloats(&out, t.values);
      Put<uint32_t>(&out, Crc(out.data() + start, out.size() - start));
    }
  }
  out.append(kEndMagic, sizeof(kEndMagic));
  return out;
}

absl::StatusOr<std::string> WriteCheckpoint(FileSystem* fs,
                                            const std::string& dir,
                                            const CheckpointData& data,
                                            int keep) {
  PS_RETURN_IF_ERROR(fs->CreateDirs(dir));
  const std::string out = EncodeCheckpoint(data);
  const std::string path = absl::StrCat(
      dir, "/", MakeName(data.version, data.shard_index, data.num_shards));
  PS_RETURN_IF_ERROR(WriteFileAtomically(fs, path, out));

  // Keep this shard's newest `keep` files (of this layout); a file that
  // cannot be listed or removed now is removed after a later checkpoint.
  std::vector<std::pair<int64_t, std::string>> mine;
  for (const std::string& name : Names(fs, dir)) {
    FileName f;
    if (ParseName(name, &f) && f.shard == data.shard_index &&
        f.num_shards == data.num_shards) {
      mine.emplace_back(f.version, absl::StrCat(dir, "/", name));
    }
  }
  std::sort(mine.rbegin(), mine.rend());
  for (size_t i = std::max(keep, 1); i < mine.size(); ++i) {
    fs->RemoveFile(mine[i].second).IgnoreError();
  }
  return path;
}

// The sparse section, after its marker.
absl::Status ReadSparseTables(const std::string& contents,
                              const std::string& path, Reader& r,
                              CheckpointData* d) {
  uint32_t num_tables = 0;
  PS_RETURN_IF_ERROR(r.Get(&num_tables));
  for (uint32_t i = 0; i < num_tables; ++i) {
    const size_t start = r.pos();
    CheckpointSparseTable t;
    int64_t rows = 0;
    PS_RETURN_IF_ERROR(r.GetBytes(&t.name));
    PS_RETURN_IF_ERROR(r.Get(&t.row_floats));
    PS_RETURN_IF_ERROR(r.Get(&rows));
    const size_t row_bytes = 12 + sizeof(float) * t.row_floats;
    if (rows < 0 || t.row_floats < 1 ||
        static_cast<uint64_t>(rows) > (contents.size() - r.pos()) / row_bytes) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", path, ": sparse table ", i, " has a bad size"));
    }
    t.keys.resize(rows);
    t.steps.resize(rows);
    for (uint64_t& k : t.keys) PS_RETURN_IF_ERROR(r.Get(&k));
    for (uint32_t& n : t.steps) PS_RETURN_IF_ERROR(r.Get(&n));
    PS_RETURN_IF_ERROR(r.GetFloats(rows * t.row_floats, &t.values));
    const size_t end = r.pos();
    uint32_t crc = 0;
    PS_RETURN_IF_ERROR(r.Get(&crc));
    if (crc != Crc(contents.data() + start, end - start)) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path,
                                              ": checksum mismatch in sparse "
                                              "table '",
                                              t.name, "'"));
    }
    d->sparse_tables.push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointData> ReadCheckpoint(FileSystem* fs,
                                              const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::string contents, fs->ReadFile(path));
  return DecodeCheckpoint(contents, path);
}

absl::StatusOr<CheckpointData> DecodeCheckpoint(const std::string& contents,
                                                const std::string& path) {
  Reader r(contents, path);
  char magic[8];
  for (char& c : magic) PS_RETURN_IF_ERROR(r.Get(&c));
  if (std::memcmp(magic, kMagic, 8) != 0) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " has a bad magic number"));
  }
  CheckpointData d;
  std::string spec;
  uint32_t num_ranges = 0;
  const size_t header_start = r.pos();
  PS_RETURN_IF_ERROR(r.GetBytes(&d.job_id));
  PS_RETURN_IF_ERROR(r.GetBytes(&spec));
  PS_RETURN_IF_ERROR(r.Get(&d.version));
  int32_t shard_index = 0, num_shards = 0;
  PS_RETURN_IF_ERROR(r.Get(&shard_index));
  PS_RETURN_IF_ERROR(r.Get(&num_shards));
  PS_RETURN_IF_ERROR(r.Get(&num_ranges));
  const size_t header_end = r.pos();
  uint32_t crc = 0;
  PS_RETURN_IF_ERROR(r.Get(&crc));
  if (crc != Crc(contents.data() + header_start, header_end - header_start)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, ": header checksum mismatch"));
  }
  if (!d.spec.ParseFromString(spec)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, ": unreadable job spec"));
  }
  d.shard_index = shard_index;
  d.num_shards = num_shards;
  for (uint32_t i = 0; i < num_ranges; ++i) {
    const size_t start = r.pos();
    CheckpointRange range;
    int64_t n = 0;
    uint8_t has1 = 0, has2 = 0;
    PS_RETURN_IF_ERROR(r.GetBytes(&range.tensor_name));
    PS_RETURN_IF_ERROR(r.Get(&range.offset));
    PS_RETURN_IF_ERROR(r.Get(&n));
    PS_RETURN_IF_ERROR(r.Get(&range.steps));
    PS_RETURN_IF_ERROR(r.Get(&has1));
    PS_RETURN_IF_ERROR(r.Get(&has2));
    PS_RETURN_IF_ERROR(r.GetFloats(n, &range.weights));
    if (has1) PS_RETURN_IF_ERROR(r.GetFloats(n, &range.slot1));
    if (has2) PS_RETURN_IF_ERROR(r.GetFloats(n, &range.slot2));
    const size_t end = r.pos();
    PS_RETURN_IF_ERROR(r.Get(&crc));
    if (crc != Crc(contents.data() + start, end - start)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", path, ": checksum mismatch in chunk ", i,
                       " (tensor '", range.tensor_name, "')"));
    }
    d.ranges.push_back(std::move(range));
  }
  for (char& c : magic) PS_RETURN_IF_ERROR(r.Get(&c));
  if (std::memcmp(magic, kSparseMagic, 8) == 0) {
    PS_RETURN_IF_ERROR(ReadSparseTables(contents, path, r, &d));
    for (char& c : magic) PS_RETURN_IF_ERROR(r.Get(&c));
  }
  if (std::memcmp(magic, kEndMagic, 8) != 0 || r.pos() != contents.size()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " has a bad trailer"));
  }
  return d;
}

std::vector<CheckpointSet> ListCheckpointSets(FileSystem* fs,
                                              const std::string& dir) {
  std::map<std::pair<int64_t, int>, std::map<int, std::string>> groups;
  // Per layout, per shard: (version, path), newest first.
  std::map<int, std::map<int, std::vector<std::pair<int64_t, std::string>>>>
      by_shard;
  for (const std::string& name : Names(fs, dir)) {
    FileName f;
    if (ParseName(name, &f)) {
      const std::string path = absl::StrCat(dir, "/", name);
      groups[{f.version, f.num_shards}][f.shard] = path;
      by_shard[f.num_shards][f.shard].emplace_back(f.version, path);
    }
  }
  std::vector<CheckpointSet> sets;
  for (const auto& [key, files] : groups) {
    if (static_cast<int>(files.size()) != key.second) continue;  // incomplete
    CheckpointSet set;
    set.version = key.first;
    set.num_shards = key.second;
    for (const auto& [shard, path] : files) set.paths.push_back(path);
    sets.push_back(std::move(set));
  }
  for (auto& [num_shards, shards] : by_shard) {
    if (static_cast<int>(shards.size()) != num_shards) continue;
    size_t depth = SIZE_MAX;
    for (auto& [shard, files] : shards) {
      std::sort(files.rbegin(), files.rend());
      depth = std::min(depth, files.size());
    }
    for (size_t i = 0; i < depth; ++i) {
      CheckpointSet set;
      set.num_shards = num_shards;
      set.mixed = true;
      set.version = INT64_MAX;
      int64_t highest = 0;
      for (const auto& [shard, files] : shards) {
        set.paths.push_back(files[i].second);
        set.version = std::min(set.version, files[i].first);
        highest = std::max(highest, files[i].first);
      }
      if (highest != set.version) sets.push_back(std::move(set));
    }
  }
  std::sort(sets.begin(), sets.end(),
            [](const CheckpointSet& a, const CheckpointSet& b) {
              if (a.version != b.version) return a.version > b.version;
              if (a.mixed != b.mixed) return !a.mixed;
              return a.num_shards > b.num_shards;
            });
  return sets;
}

std::vector<CheckpointSet> ListOwnCheckpoints(FileSystem* fs,
                                              const std::string& dir,
                                              int num_shards, int shard) {
  std::vector<CheckpointSet> sets;
  for (const std::string& name : Names(fs, dir)) {
    FileName f;
    if (ParseName(name, &f) && f.num_shards == num_shards && f.shard == shard) {
      CheckpointSet set;
      set.version = f.version;
      set.num_shards = num_shards;
      set.paths.push_back(absl::StrCat(dir, "/", name));
      sets.push_back(std::move(set));
    }
  }
  std::sort(sets.begin(), sets.end(),
            [](const CheckpointSet& a, const CheckpointSet& b) {
              return a.version > b.version;
            });
  return sets;
}

}  // namespace ps
