// The file seam (LevelDB's Env, cut down to what the daemons need): every
// file the daemons keep (checkpoints, the coordinator's job store, port
// files) goes through a FileSystem, so that tests can make any write, fsync
// or rename fail (common/platform/fault_injecting_file_system.h) and check what
// a failure leaves behind. WriteFileAtomically below is the one atomic write of
// the tree.
//
// Errors name the path and the system error: PERMISSION_DENIED when the
// system refuses (EACCES, EPERM), NOT_FOUND where a method says so,
// INTERNAL otherwise.
#ifndef PS_COMMON_PLATFORM_FILE_SYSTEM_H_
#define PS_COMMON_PLATFORM_FILE_SYSTEM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps {

// A file open for writing, owned by the caller; the destructor closes it
// (without syncing). Not thread-safe.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all of `data` at the end of the file. A failure may leave part
  // of it written.
  virtual absl::Status Append(absl::string_view data) = 0;
  // fsync(2): the data and the file's metadata are on disk.
  virtual absl::Status Sync() = 0;
  // fdatasync(2): the data, and what reading it needs (the size), are on
  // disk.
  virtual absl::Status SyncData() = 0;
  virtual absl::Status Close() = 0;
};

// Implementations are thread-safe.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The operating system's files (POSIX calls): stateless, process-wide,
  // never destroyed.
  static FileSystem* Posix();

  // Creates `path`, or truncates it if it exists.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens `path` for appending, creating it if missing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;

  // The whole file; NOT_FOUND when it does not exist.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // The names (not paths) of the entries of `dir`, in no order, without
  // "." and ".."; NOT_FOUND when `dir` does not exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& dir) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  // NOT_FOUND when `path` does not exist.
  virtual absl::StatusOr<int64_t> FileSize(const std::string& path) = 0;

  // Creates `dir` and its missing parents; OK when it exists already.
  virtual absl::Status CreateDirs(const std::string& dir) = 0;
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // rename(2): `to`, if it exists, is replaced atomically.
  virtual absl::Status RenameFile(const std::string& from,
                                  const std::string& to) = 0;
  // fsync(2) of a directory: the entries created, renamed or removed in it
  // survive a crash.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
  virtual absl::Status TruncateFile(const std::string& path, int64_t size) = 0;
};

// Replaces the contents of `path` with `data` so that a crash leaves the
// old contents or the new, never a mix: writes <path>.tmp, fsyncs it,
// renames it over `path` and fsyncs the directory. A failure before the
// rename leaves `path` as it was and removes the temporary file; the error
// names the file that failed (<path>.tmp, `path` or its directory).
absl::Status WriteFileAtomically(FileSystem* fs, const std::string& path,
                                 absl::string_view data);

// The directory holding `path` ("." for a bare file name).
std::string DirName(const std::string& path);

}  // namespace ps

#endif  // PS_COMMON_PLATFORM_FILE_SYSTEM_H_
