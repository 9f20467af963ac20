#include "common/platform/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps {
namespace {

// Owns a file descriptor.
class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path)
      : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("cannot write", path_, errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fsync(fd_) != 0) return ErrnoError("cannot fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status SyncData() override {
    if (::fdatasync(fd_) != 0) return ErrnoError("cannot fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) {
      return ErrnoError("cannot close", path_, errno);
    }
    return absl::OkStatus();
  }

 private:
  int fd_;
  const std::string path_;
};

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    return Open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC);
  }

  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) {
        return absl::NotFoundError(absl::StrCat("no such file: ", path));
      }
      return ErrnoError("cannot open", path, errno);
    }
    std::string contents;
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) contents.reserve(st.st_size);
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        absl::Status s = ErrnoError("cannot read", path, errno);
        ::close(fd);
        return s;
      }
      contents.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    return contents;
  }

  absl::StatusOr<std::vector<std::string>> ListDir(
      const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) {
        return absl::NotFoundError(absl::StrCat("no such directory: ", dir));
      }
      return ErrnoError("cannot list", dir, errno);
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int error = errno;
    ::closedir(d);
    if (error != 0) return ErrnoError("cannot list", dir, error);
    return names;
  }

  bool FileExists(const std::string& path) override {
    return ::access(path.c_str(), F_OK) == 0;
  }

  bool IsDirectory(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  absl::StatusOr<int64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) {
        return absl::NotFoundError(absl::StrCat("no such file: ", path));
      }
      return ErrnoError("cannot stat", path, errno);
    }
    return static_cast<int64_t>(st.st_size);
  }

  absl::Status CreateDirs(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return ErrnoError("cannot create directory", dir, ec.value());
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) {
      return ErrnoError("cannot remove", path, errno);
    }
    return absl::OkStatus();
  }

  absl::Status RenameFile(const std::string& from,
                          const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoError(absl::StrCat("cannot rename ", from, " to"), to, errno);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("cannot open directory", dir, errno);
    absl::Status s;
    if (::fsync(fd) != 0) s = ErrnoError("cannot fsync", dir, errno);
    ::close(fd);
    return s;
  }

  absl::Status TruncateFile(const std::string& path, int64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
      return ErrnoError("cannot truncate", path, errno);
    }
    return absl::OkStatus();
  }

 private:
  static absl::StatusOr<std::unique_ptr<WritableFile>> Open(
      const std::string& path, int flags) {
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return ErrnoError("cannot create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(fd, path));
  }
};

}  // namespace

FileSystem* FileSystem::Posix() {
  static FileSystem* const fs = new PosixFileSystem;
  return fs;
}

std::string DirName(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

absl::Status WriteFileAtomically(FileSystem* fs, const std::string& path,
                                 absl::string_view data) {
  const std::string tmp = path + ".tmp";
  absl::Status status = [&]() -> absl::Status {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                        fs->NewWritableFile(tmp));
    PS_RETURN_IF_ERROR(file->Append(data));
    PS_RETURN_IF_ERROR(file->Sync());
    PS_RETURN_IF_ERROR(file->Close());
    return fs->RenameFile(tmp, path);
  }();
  if (!status.ok()) {
    fs->RemoveFile(tmp).IgnoreError();  // absent if it was never created
    return status;
  }
  // The rename itself must survive a crash: sync the directory entry.
  return fs->SyncDir(DirName(path));
}

}  // namespace ps
