// Internal to //common/spec:config. Rule violations of a config, each named by
// its field path and, for text input, its line.
#ifndef PS_COMMON_SPEC_CONFIG_VIOLATIONS_H_
#define PS_COMMON_SPEC_CONFIG_VIOLATIONS_H_

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace ps::config_internal {

struct PathElem {
  const char* field;
  int index = -1;  // for repeated fields
};

// Accumulates rule violations, each prefixed with the field's dotted path
// and, when the spec came from text, the line it was written on.
class Violations {
 public:
  Violations(const google::protobuf::Descriptor* root,
             const google::protobuf::TextFormat::ParseInfoTree* tree,
             absl::string_view source)
      : root_(root), tree_(tree), source_(source) {}

  void Add(absl::Span<const PathElem> path, absl::string_view problem);

  // INVALID_ARGUMENT with one violation per line; OK if none.
  absl::Status ToStatus() const;

 private:
  const google::protobuf::Descriptor* root_;
  const google::protobuf::TextFormat::ParseInfoTree* tree_;
  std::string source_;
  std::vector<std::string> messages_;
};

inline bool Finite(double x) { return std::isfinite(x); }

}  // namespace ps::config_internal

#endif  // PS_COMMON_SPEC_CONFIG_VIOLATIONS_H_
