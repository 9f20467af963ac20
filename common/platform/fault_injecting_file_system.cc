#include "common/platform/fault_injecting_file_system.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps {
namespace {

const char* Verb(FaultInjectingFileSystem::Op op) {
  using Op = FaultInjectingFileSystem::Op;
  switch (op) {
    case Op::kCreate:
      return "cannot create";
    case Op::kWrite:
      return "cannot write";
    case Op::kSync:
    case Op::kSyncDir:
      return "cannot fsync";
    case Op::kRename:
      return "cannot rename to";
    case Op::kRemove:
      return "cannot remove";
    case Op::kTruncate:
      return "cannot truncate";
    case Op::kCreateDirs:
      return "cannot create directory";
  }
  return "cannot use";
}

// Checks each call with the file system before passing it on.
class FaultInjectingWritableFile final : public WritableFile {
 public:
  FaultInjectingWritableFile(FaultInjectingFileSystem* fs, std::string path,
                             std::unique_ptr<WritableFile> base)
      : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    absl::Status s = fs_->Check(FaultInjectingFileSystem::Op::kWrite, path_);
    if (!s.ok()) {
      // A short write, then the error.
      base_->Append(data.substr(0, data.size() / 2)).IgnoreError();
      return s;
    }
    return base_->Append(data);
  }
  absl::Status Sync() override {
    PS_RETURN_IF_ERROR(fs_->Check(FaultInjectingFileSystem::Op::kSync, path_));
    return base_->Sync();
  }
  absl::Status SyncData() override {
    PS_RETURN_IF_ERROR(fs_->Check(FaultInjectingFileSystem::Op::kSync, path_));
    return base_->SyncData();
  }
  absl::Status Close() override { return base_->Close(); }

 private:
  FaultInjectingFileSystem* const fs_;
  const std::string path_;
  const std::unique_ptr<WritableFile> base_;
};

}  // namespace

void FaultInjectingFileSystem::FailNth(Op op, int n, int error_number) {
  absl::MutexLock l(&mu_);
  faults_.insert({op, Fault{n, error_number}});
}

int FaultInjectingFileSystem::Count(Op op) const {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(op);
  return it == counts_.end() ? 0 : it->second;
}

absl::Status FaultInjectingFileSystem::Check(Op op, const std::string& path) {
  absl::MutexLock l(&mu_);
  ++counts_[op];
  absl::Status result;
  auto [first, last] = faults_.equal_range(op);
  for (auto it = first; it != last;) {
    if (--it->second.countdown > 0) {
      ++it;
      continue;
    }
    if (result.ok()) {
      result = ErrnoError(absl::StrCat(Verb(op), " (injected)"), path,
                          it->second.error_number);
    }
    it = faults_.erase(it);
  }
  return result;
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectingFileSystem::NewWritableFile(const std::string& path) {
  PS_RETURN_IF_ERROR(Check(Op::kCreate, path));
  return Wrap(path, base_->NewWritableFile(path));
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectingFileSystem::NewAppendableFile(const std::string& path) {
  PS_RETURN_IF_ERROR(Check(Op::kCreate, path));
  return Wrap(path, base_->NewAppendableFile(path));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectingFileSystem::Wrap(
    const std::string& path,
    absl::StatusOr<std::unique_ptr<WritableFile>> file) {
  if (!file.ok()) return file.status();
  return std::unique_ptr<WritableFile>(
      new FaultInjectingWritableFile(this, path, *std::move(file)));
}

absl::Status FaultInjectingFileSystem::CreateDirs(const std::string& dir) {
  PS_RETURN_IF_ERROR(Check(Op::kCreateDirs, dir));
  return base_->CreateDirs(dir);
}

absl::Status FaultInjectingFileSystem::RemoveFile(const std::string& path) {
  PS_RETURN_IF_ERROR(Check(Op::kRemove, path));
  return base_->RemoveFile(path);
}

absl::Status FaultInjectingFileSystem::RenameFile(const std::string& from,
                                                  const std::string& to) {
  PS_RETURN_IF_ERROR(Check(Op::kRename, to));
  return base_->RenameFile(from, to);
}

absl::Status FaultInjectingFileSystem::SyncDir(const std::string& dir) {
  PS_RETURN_IF_ERROR(Check(Op::kSyncDir, dir));
  return base_->SyncDir(dir);
}

absl::Status FaultInjectingFileSystem::TruncateFile(const std::string& path,
                                                    int64_t size) {
  PS_RETURN_IF_ERROR(Check(Op::kTruncate, path));
  return base_->TruncateFile(path, size);
}

}  // namespace ps
