// A FileSystem for tests (testonly) that passes every call to another one
// and fails the calls a test picks: the nth write, fsync, rename, ... from
// now. The error is the one the real call would return for that errno (it
// names the path). A failed write first writes half of its bytes, as a full
// disk leaves a short write behind, so tests see what a torn write leaves.
// Thread-safe.
#ifndef PS_COMMON_PLATFORM_FAULT_INJECTING_FILE_SYSTEM_H_
#define PS_COMMON_PLATFORM_FAULT_INJECTING_FILE_SYSTEM_H_

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/platform/file_system.h"

namespace ps {

class FaultInjectingFileSystem final : public FileSystem {
 public:
  // The calls that can be made to fail.
  enum class Op {
    kCreate,      // NewWritableFile, NewAppendableFile
    kWrite,       // WritableFile::Append
    kSync,        // WritableFile::Sync, WritableFile::SyncData
    kRename,      // RenameFile
    kSyncDir,     // SyncDir
    kRemove,      // RemoveFile
    kTruncate,    // TruncateFile
    kCreateDirs,  // CreateDirs
  };

  // `base` (not owned) does the real work; it must outlive this.
  explicit FaultInjectingFileSystem(FileSystem* base = FileSystem::Posix())
      : base_(base) {}

  // The nth call of `op` from now (1: the next one) fails with
  // `error_number` (default EIO). Several faults may be armed at once.
  void FailNth(Op op, int n, int error_number = EIO);
  // Calls of `op` so far, failed ones included.
  int Count(Op op) const;

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override;
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    return base_->ReadFile(path);
  }
  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& dir) override {
    return base_->ListDir(dir);
  }
  bool FileExists(const std::string& path) override {
    return base_->FileExists(path);
  }
  bool IsDirectory(const std::string& path) override {
    return base_->IsDirectory(path);
  }
  absl::StatusOr<int64_t> FileSize(const std::string& path) override {
    return base_->FileSize(path);
  }
  absl::Status CreateDirs(const std::string& dir) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::Status TruncateFile(const std::string& path, int64_t size) override;

  // Counts a call of `op` on `path`; the injected error if this call is
  // one to fail, else OK. (Used by the files it hands out.)
  absl::Status Check(Op op, const std::string& path);

 private:
  // The base's file, its calls checked by Check.
  absl::StatusOr<std::unique_ptr<WritableFile>> Wrap(
      const std::string& path,
      absl::StatusOr<std::unique_ptr<WritableFile>> file);

  struct Fault {
    int countdown = 0;  // fails when it reaches 0
    int error_number = EIO;
  };

  FileSystem* const base_;
  mutable absl::Mutex mu_;
  std::map<Op, int> counts_ ABSL_GUARDED_BY(mu_);
  std::multimap<Op, Fault> faults_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_FAULT_INJECTING_FILE_SYSTEM_H_
