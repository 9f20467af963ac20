// A text file written line by line through a large buffer, gzip-compressed
// (zlib) or plain; a write or close error (a full disk) is reported, not
// lost.
#ifndef PS_TOOLS_DATA_OUTPUT_FILE_H_
#define PS_TOOLS_DATA_OUTPUT_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ps::data_tools {

class OutputFile {
 public:
  // gzip_level 0: plain; 1..9: gzip at that level (1 is fastest).
  static absl::StatusOr<std::unique_ptr<OutputFile>> Create(
      const std::string& path, int gzip_level);
  virtual ~OutputFile() = default;

  virtual absl::Status Write(absl::string_view bytes) = 0;
  // Flushes and closes; the first error of any write or of the close.
  virtual absl::Status Close() = 0;
};

// Writes `text` to `path` in one go (the truth files).
absl::Status WriteTextFile(const std::string& path, absl::string_view text);

}  // namespace ps::data_tools

#endif  // PS_TOOLS_DATA_OUTPUT_FILE_H_
