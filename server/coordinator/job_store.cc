#include "server/coordinator/job_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/config.h"
#include "common/status.h"

namespace ps::coordinator {
namespace {

namespace fs = std::filesystem;

constexpr uint8_t kEventRecord = 1;
constexpr uint8_t kPointRecord = 2;
constexpr size_t kHeaderBytes = 9;  // type, length, crc
// A record larger than this is corruption, not data.
constexpr uint32_t kMaxRecordBytes = 16 << 20;

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(e));
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// RAII file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY));
  if (fd.get() < 0) return ErrnoError("cannot open directory", dir);
  if (::fsync(fd.get()) != 0) return ErrnoError("cannot fsync", dir);
  return absl::OkStatus();
}

// Writes `data` to `path` so that a crash leaves either the old or the new
// contents, never a mix.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view data) {
  const std::string tmp = path + ".tmp";
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoError("cannot create", tmp);
    absl::Status s = WriteAll(fd.get(), data, tmp);
    if (!s.ok()) return s;
    if (::fsync(fd.get()) != 0) return ErrnoError("cannot fsync", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoError("cannot rename into", path);
  }
  return SyncDir(fs::path(path).parent_path().string());
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

uint32_t Crc(absl::string_view data) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data.data()),
            static_cast<uInt>(data.size())));
}

void Frame(uint8_t type, const std::string& payload, std::string* out) {
  out->push_back(static_cast<char>(type));
  PutU32(out, static_cast<uint32_t>(payload.size()));
  PutU32(out, Crc(payload));
  out->append(payload);
}

class FileJobStore : public JobStore {
 public:
  explicit FileJobStore(std::string dir) : dir_(std::move(dir)) {}

  absl::Status PutRecord(const JobRecord& record, int64_t seq) override {
    PS_RETURN_IF_ERROR(CheckJobId(record.job_id()));
    absl::MutexLock l(&io_mu_);
    auto it = record_seq_.find(record.job_id());
    if (it != record_seq_.end() && seq < it->second) return absl::OkStatus();
    const std::string job_dir = JobDir(record.job_id());
    std::error_code ec;
    if (!fs::is_directory(job_dir, ec)) {
      if (!fs::create_directories(job_dir, ec)) {
        return absl::InternalError(
            absl::StrCat("cannot create ", job_dir, ": ", ec.message()));
      }
      PS_RETURN_IF_ERROR(SyncDir(JobsDir()));
    }
    std::string bytes;
    if (!record.SerializeToString(&bytes)) {
      return absl::InternalError("cannot serialise a job record");
    }
    PS_RETURN_IF_ERROR(WriteFileAtomically(job_dir + "/record.pb", bytes));
    record_seq_[record.job_id()] = seq;
    return absl::OkStatus();
  }

  absl::Status Append(absl::string_view job_id,
                      absl::Span<const JobEvent> events,
                      absl::Span<const MetricPoint> points) override {
    PS_RETURN_IF_ERROR(CheckJobId(job_id));
    if (events.empty() && points.empty()) return absl::OkStatus();
    std::string buf;
    std::string payload;
    for (const JobEvent& e : events) {
      e.SerializeToString(&payload);
      Frame(kEventRecord, payload, &buf);
    }
    for (const MetricPoint& p : points) {
      p.SerializeToString(&payload);
      Frame(kPointRecord, payload, &buf);
    }
    absl::MutexLock l(&io_mu_);
    const std::string job_dir = JobDir(job_id);
    std::error_code ec;
    if (!fs::is_directory(job_dir, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " has no record in ", dir_));
    }
    const std::string path = job_dir + "/log";
    const bool created = !fs::exists(path, ec);
    Fd fd(
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoError("cannot open", path);
    PS_RETURN_IF_ERROR(WriteAll(fd.get(), buf, path));
    if (::fdatasync(fd.get()) != 0) return ErrnoError("cannot fsync", path);
    if (created) PS_RETURN_IF_ERROR(SyncDir(job_dir));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<StoredJob>> LoadAll() override {
    absl::MutexLock l(&io_mu_);
    std::vector<StoredJob> jobs;
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(JobsDir(), ec)) {
      if (entry.is_directory()) names.push_back(entry.path().filename());
    }
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot list ", JobsDir(), ": ", ec.message()));
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string job_dir = JobDir(name);
      absl::StatusOr<std::string> bytes = ReadFile(job_dir + "/record.pb");
      StoredJob job;
      if (!bytes.ok() || !job.record.ParseFromString(*bytes) ||
          job.record.job_id() != name) {
        continue;  // never acknowledged: the record is written first
      }
      PS_RETURN_IF_ERROR(ReadLog(job_dir + "/log", &job));
      record_seq_[name] = 0;
      jobs.push_back(std::move(job));
    }
    return jobs;
  }

  absl::Status PutNextMemberId(int64_t next_id) override {
    absl::MutexLock l(&io_mu_);
    return WriteFileAtomically(dir_ + "/next_member_id",
                               absl::StrCat(next_id, "\n"));
  }

  absl::StatusOr<int64_t> GetNextMemberId() override {
    absl::MutexLock l(&io_mu_);
    const std::string path = dir_ + "/next_member_id";
    std::error_code ec;
    if (!fs::exists(path, ec)) return 1;
    PS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) || v < 1) {
      return absl::DataLossError(absl::StrCat(path, " is corrupt"));
    }
    return v;
  }

  const std::string& dir() const override { return dir_; }

 private:
  static absl::Status CheckJobId(absl::string_view id) {
    if (id.empty() || id.size() > 128 || id[0] == '.' ||
        id.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
            absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a valid job id: '", id, "'"));
    }
    return absl::OkStatus();
  }

  std::string JobsDir() const { return dir_ + "/jobs"; }
  std::string JobDir(absl::string_view id) const {
    return absl::StrCat(dir_, "/jobs/", id);
  }

  // Reads a log, cutting off a torn or corrupt tail (truncating the file so
  // later appends follow the last good record).
  static absl::Status ReadLog(const std::string& path, StoredJob* job) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return absl::OkStatus();
    PS_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
    size_t pos = 0;
    while (pos < data.size()) {
      if (data.size() - pos < kHeaderBytes) break;
      const uint8_t type = static_cast<uint8_t>(data[pos]);
      const uint32_t len = GetU32(data.data() + pos + 1);
      const uint32_t crc = GetU32(data.data() + pos + 5);
      if (len > kMaxRecordBytes || data.size() - pos - kHeaderBytes < len) {
        break;
      }
      absl::string_view payload(data.data() + pos + kHeaderBytes, len);
      if (Crc(payload) != crc) break;
      bool parsed = false;
      if (type == kEventRecord) {
        parsed = job->events.emplace_back().ParseFromArray(payload.data(),
                                                           payload.size());
        if (!parsed) job->events.pop_back();
      } else if (type == kPointRecord) {
        parsed = job->points.emplace_back().ParseFromArray(payload.data(),
                                                           payload.size());
        if (!parsed) job->points.pop_back();
      }
      if (!parsed) break;
      pos += kHeaderBytes + len;
    }
    if (pos < data.size()) {
      job->dropped_tail_bytes = static_cast<int64_t>(data.size() - pos);
      if (::truncate(path.c_str(), static_cast<off_t>(pos)) != 0) {
        return ErrnoError("cannot truncate the torn tail of", path);
      }
    }
    return absl::OkStatus();
  }

  const std::string dir_;
  absl::Mutex io_mu_;
  std::map<std::string, int64_t, std::less<>> record_seq_
      ABSL_GUARDED_BY(io_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(
    const std::string& dir) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("the job store needs a data directory");
  }
  std::error_code ec;
  fs::create_directories(dir + "/jobs", ec);
  if (ec || !fs::is_directory(dir + "/jobs", ec)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create the job store in ", dir, ": ", ec.message()));
  }
  return std::unique_ptr<JobStore>(new FileJobStore(dir));
}

}  // namespace ps::coordinator
