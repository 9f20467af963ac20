// libFuzzer target: common/config's text-format job and cluster loaders on
// arbitrary text. A valid job spec must also survive NormalizeJobSpec again
// (it is documented as idempotent) and re-validation.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "common/spec/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  ps::ValidationOptions options;
  options.check_dataset_files = false;  // no file system in the fuzz loop
  absl::StatusOr<ps::JobSpec> job = ps::ParseJobSpec(text, "fuzz", options);
  if (job.ok()) {
    const ps::JobSpec again = ps::NormalizeJobSpec(*job);
    if (again.SerializeAsString() != job->SerializeAsString()) {
      abort();  // NormalizeJobSpec is not idempotent
    }
    (void)ps::ValidateJobSpec(*job, options);
  }
  (void)ps::ParseClusterSpec(text, "fuzz");
  return 0;
}
