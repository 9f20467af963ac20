#include "server/shard/member_id_file.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/platform/status.h"

namespace ps::server {

std::string MemberIdPath(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/member_id");
}

absl::StatusOr<int64_t> LoadMemberId(FileSystem* fs,
                                     const std::string& data_dir) {
  if (data_dir.empty()) return 0;
  const std::string path = MemberIdPath(data_dir);
  if (!fs->FileExists(path)) return 0;
  PS_ASSIGN_OR_RETURN(std::string text, fs->ReadFile(path));
  int64_t id = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &id) || id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     " holds no member id (a positive integer); remove it to "
                     "register as a new member"));
  }
  return id;
}

absl::Status SaveMemberId(FileSystem* fs, const std::string& data_dir,
                          int64_t id) {
  if (data_dir.empty()) return absl::OkStatus();
  if (id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("member id must be positive, got ", id));
  }
  absl::StatusOr<int64_t> kept = LoadMemberId(fs, data_dir);
  if (kept.ok() && *kept == id) return absl::OkStatus();
  PS_RETURN_IF_ERROR(fs->CreateDirs(data_dir));
  return WriteFileAtomically(fs, MemberIdPath(data_dir),
                             absl::StrCat(id, "\n"));
}

}  // namespace ps::server
