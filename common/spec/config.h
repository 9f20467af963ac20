// Job and cluster configs: text-format loading, validation with errors that
// name the field (and its line), and normalisation (defaults filled in).
#ifndef PS_COMMON_SPEC_CONFIG_H_
#define PS_COMMON_SPEC_CONFIG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/config.pb.h"

namespace ps {

inline constexpr char kDefaultDatasetPath[] =
    "/usr/share/datasets/fashion-mnist";

// The four IDX files a dataset directory must hold.
inline constexpr const char* kDatasetFiles[] = {
    "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};

struct ValidationOptions {
  // Check that data.path (or the default) holds the dataset files. The
  // coordinator and psctl check; unit tests of pure rules may not.
  bool check_dataset_files = true;
};

// Parses a JobSpec from text format. `source` names the input in errors
// ("job.pbtxt:12:5: ..."). Syntax errors and unknown fields are
// INVALID_ARGUMENT with line and column. The result is validated (all rule
// violations reported at once, each with its field and line) and normalised.
absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view text,
                                     absl::string_view source,
                                     const ValidationOptions& options = {});

// ParseJobSpec on a file's contents; NOT_FOUND names a missing file.
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path,
                                    const ValidationOptions& options = {});

// Checks every rule; INVALID_ARGUMENT lists each violation on its own line as
// "field.path: problem". Takes an unnormalised spec (zero = default).
absl::Status ValidateJobSpec(const JobSpec& spec,
                             const ValidationOptions& options = {});

// Fills in the defaults documented in proto/config.proto and expands the
// model's tensors. Idempotent. Call on a valid spec.
JobSpec NormalizeJobSpec(const JobSpec& spec);

absl::StatusOr<ClusterSpec> ParseClusterSpec(absl::string_view text,
                                             absl::string_view source);
absl::StatusOr<ClusterSpec> LoadClusterSpec(const std::string& path);
absl::Status ValidateClusterSpec(const ClusterSpec& spec);

// Reads a whole file (FileSystem::Posix()->ReadFile). NOT_FOUND /
// PERMISSION_DENIED / INTERNAL name the path.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace ps

#endif  // PS_COMMON_SPEC_CONFIG_H_
