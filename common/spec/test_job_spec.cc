#include "common/spec/test_job_spec.h"

namespace ps::testing {

JobSpec ConstantSgdJob(ConsistencySpec::Model model,
                       absl::Span<const std::pair<const char*, int>> tensors,
                       float value) {
  JobSpec spec;
  for (const auto& [name, n] : tensors) {
    TensorSpec* t = spec.mutable_model()->add_tensors();
    t->set_name(name);
    t->add_shape(n);
    t->mutable_init()->set_kind(InitializerSpec::CONSTANT);
    t->mutable_init()->set_value(value);
  }
  spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  spec.mutable_consistency()->set_model(model);
  spec.mutable_data()->set_max_steps(100);
  return spec;
}

}  // namespace ps::testing
