#include "common/spec/config_violations.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ps::config_internal {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::TextFormat;

void Violations::Add(absl::Span<const PathElem> path,
                     absl::string_view problem) {
  std::string name;
  const Descriptor* desc = root_;
  const TextFormat::ParseInfoTree* tree = tree_;
  int line = -1;
  for (const PathElem& e : path) {
    if (!name.empty()) absl::StrAppend(&name, ".");
    absl::StrAppend(&name, e.field);
    if (e.index >= 0) absl::StrAppend(&name, "[", e.index, "]");
    const FieldDescriptor* field =
        desc != nullptr ? desc->FindFieldByName(e.field) : nullptr;
    if (field == nullptr) {
      desc = nullptr;
      tree = nullptr;
      continue;
    }
    // A repeated field named without an index has no single location.
    if (field->is_repeated() != (e.index >= 0)) tree = nullptr;
    if (tree != nullptr) {
      const auto loc = tree->GetLocation(field, e.index);
      if (loc.line >= 0) line = loc.line;
      tree = field->message_type() != nullptr
                 ? tree->GetTreeForNested(field, e.index)
                 : nullptr;
    }
    desc = field->message_type();
  }
  std::string where = name;
  if (line >= 0) where = absl::StrCat(source_, ":", line + 1, ": ", name);
  messages_.push_back(absl::StrCat(where, ": ", problem));
}

absl::Status Violations::ToStatus() const {
  if (messages_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(messages_, "\n"));
}

}  // namespace ps::config_internal
