// A job spec for tests of the data plane: tensors of constant weights trained
// by SGD at learning rate 1, so that a weight is its initial value less the
// gradients applied to it.
#ifndef PS_COMMON_SPEC_TEST_JOB_SPEC_H_
#define PS_COMMON_SPEC_TEST_JOB_SPEC_H_

#include <utility>

#include "absl/types/span.h"
#include "proto/config.pb.h"

namespace ps::testing {

// Tensors (name, elements) of 1-D shape initialised to `value`, plain SGD at
// learning rate 1, consistency `model`, at most 100 steps. The name, seed,
// chunk size and worker count are the caller's to set.
JobSpec ConstantSgdJob(ConsistencySpec::Model model,
                       absl::Span<const std::pair<const char*, int>> tensors,
                       float value = 1.0f);

}  // namespace ps::testing

#endif  // PS_COMMON_SPEC_TEST_JOB_SPEC_H_
