#include "server/coordinator/job_store.h"

#include <zlib.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/status.h"

namespace ps::coordinator {
namespace {

constexpr uint8_t kEventRecord = 1;
constexpr uint8_t kPointRecord = 2;
constexpr size_t kHeaderBytes = 9;  // type, length, crc
// A record larger than this is corruption, not data.
constexpr uint32_t kMaxRecordBytes = 16 << 20;

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
  FileJobStore(std::string dir, FileSystem* fs)
      : dir_(std::move(dir)), fs_(fs) {}

  absl::Status PutRecord(const JobRecord& record, int64_t seq) override {
    PS_RETURN_IF_ERROR(CheckJobId(record.job_id()));
    absl::MutexLock l(&io_mu_);
    auto it = record_seq_.find(record.job_id());
    if (it != record_seq_.end() && seq < it->second) return absl::OkStatus();
    const std::string job_dir = JobDir(record.job_id());
    if (!fs_->IsDirectory(job_dir)) {
      PS_RETURN_IF_ERROR(fs_->CreateDirs(job_dir));
      PS_RETURN_IF_ERROR(fs_->SyncDir(JobsDir()));
    }
    std::string bytes;
    if (!record.SerializeToString(&bytes)) {
      return absl::InternalError("cannot serialise a job record");
    }
    PS_RETURN_IF_ERROR(WriteFileAtomically(fs_, job_dir + "/record.pb", bytes));
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
    if (!fs_->IsDirectory(job_dir)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " has no record in ", dir_));
    }
    const std::string path = job_dir + "/log";
    const bool created = !fs_->FileExists(path);
    int64_t acknowledged_end = 0;
    if (auto torn = torn_logs_.find(path); torn != torn_logs_.end()) {
      // An earlier append failed and its bytes could not be cut off then.
      PS_RETURN_IF_ERROR(fs_->TruncateFile(path, torn->second));
      acknowledged_end = torn->second;
      torn_logs_.erase(torn);
    } else if (!created) {
      PS_ASSIGN_OR_RETURN(acknowledged_end, fs_->FileSize(path));
    }
    absl::Status s = AppendAndSync(path, buf);
    if (!s.ok()) {
      // Part of `buf` may be in the file. Cut it off, so that later appends
      // follow the last acknowledged record: a load stops at the first torn
      // record and would drop every record after it. If the cut fails too,
      // it is tried again before the next append to this log.
      if (!fs_->TruncateFile(path, acknowledged_end).ok()) {
        torn_logs_[path] = acknowledged_end;
      }
      return s;
    }
    if (created) PS_RETURN_IF_ERROR(fs_->SyncDir(job_dir));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<StoredJob>> LoadAll() override {
    absl::MutexLock l(&io_mu_);
    std::vector<StoredJob> jobs;
    PS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        fs_->ListDir(JobsDir()));
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string job_dir = JobDir(name);
      if (!fs_->IsDirectory(job_dir)) continue;
      absl::StatusOr<std::string> bytes = fs_->ReadFile(job_dir + "/record.pb");
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
    return WriteFileAtomically(fs_, dir_ + "/next_member_id",
                               absl::StrCat(next_id, "\n"));
  }

  absl::StatusOr<int64_t> GetNextMemberId() override {
    absl::MutexLock l(&io_mu_);
    const std::string path = dir_ + "/next_member_id";
    if (!fs_->FileExists(path)) return 1;
    PS_ASSIGN_OR_RETURN(std::string text, fs_->ReadFile(path));
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

  absl::Status AppendAndSync(const std::string& path, absl::string_view data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                        fs_->NewAppendableFile(path));
    PS_RETURN_IF_ERROR(file->Append(data));
    PS_RETURN_IF_ERROR(file->SyncData());
    return file->Close();
  }

  // Reads a log, cutting off a torn or corrupt tail (truncating the file so
  // later appends follow the last good record).
  absl::Status ReadLog(const std::string& path, StoredJob* job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_) {
    if (!fs_->FileExists(path)) return absl::OkStatus();
    PS_ASSIGN_OR_RETURN(std::string data, fs_->ReadFile(path));
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
      PS_RETURN_IF_ERROR(Annotate(
          fs_->TruncateFile(path, static_cast<int64_t>(pos)), "torn tail"));
    }
    torn_logs_.erase(path);
    return absl::OkStatus();
  }

  const std::string dir_;
  FileSystem* const fs_;
  absl::Mutex io_mu_;
  std::map<std::string, int64_t, std::less<>> record_seq_
      ABSL_GUARDED_BY(io_mu_);
  // Logs whose last append failed and could not be cut back: path -> the
  // end of the last acknowledged record.
  std::map<std::string, int64_t> torn_logs_ ABSL_GUARDED_BY(io_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(
    const std::string& dir, const JobStoreOptions& options) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("the job store needs a data directory");
  }
  FileSystem* fs = options.file_system != nullptr ? options.file_system
                                                  : FileSystem::Posix();
  absl::Status s = fs->CreateDirs(dir + "/jobs");
  if (!s.ok() || !fs->IsDirectory(dir + "/jobs")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create the job store in ", dir, ": ", s.message()));
  }
  return std::unique_ptr<JobStore>(new FileJobStore(dir, fs));
}

}  // namespace ps::coordinator
