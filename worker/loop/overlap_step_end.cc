#include "worker/loop/overlap_step_end.h"

#include <algorithm>
#include <utility>

#include "common/platform/status.h"

namespace ps::worker {

absl::StatusOr<std::unique_ptr<OverlapStepEnd>> OverlapStepEnd::Create(
    TrainableModel* model, kernels::Backend* backend, ParameterStaging* staging,
    client::ParameterAccess* params) {
  std::unique_ptr<OverlapStepEnd> o(new OverlapStepEnd(model, staging, params));
  for (const ParameterInfo& p : model->parameters()) {
    if (staging->direct()) {
      PS_ASSIGN_OR_RETURN(kernels::DeviceBuffer g,
                          backend->AllocateArray<float>(p.size));
      PS_ASSIGN_OR_RETURN(kernels::DeviceBuffer w,
                          backend->AllocateArray<float>(p.size));
      o->spare_grads_.push_back(std::move(g));
      o->spare_weights_.push_back(std::move(w));
    } else {
      o->host_grads_.emplace_back(p.size);
      o->host_weights_.emplace_back(p.size);
    }
  }
  return o;
}

absl::StatusOr<client::CallResult> OverlapStepEnd::TakeArrivedWeights() {
  client::Handle pending = *std::move(in_flight_);
  in_flight_.reset();
  PS_ASSIGN_OR_RETURN(const client::CallResult end, pending.Wait());
  const std::vector<absl::Span<float>> weights = staging_->Weights();
  for (int i = 0; i < model_->num_parameters(); ++i) {
    if (staging_->direct()) {
      // The weights that arrived become the model's; its previous ones, no
      // longer read, receive the next.
      PS_RETURN_IF_ERROR(model_->SwapParameterBuffer(i, spare_weights_[i]));
    } else {
      std::copy(host_weights_[i].begin(), host_weights_[i].end(),
                weights[i].begin());
    }
  }
  return end;
}

absl::StatusOr<OverlapStepEnd::Ended> OverlapStepEnd::Drain() {
  Ended ended;
  ended.next_version = -1;
  if (!in_flight_.has_value()) return ended;
  PS_ASSIGN_OR_RETURN(const client::CallResult end, TakeArrivedWeights());
  ended.staleness = static_cast<double>(end.staleness);
  ended.staleness_ends = 1;
  ended.next_version = end.version;
  return ended;
}

absl::StatusOr<OverlapStepEnd::Ended> OverlapStepEnd::EndStep(
    int64_t clock, int64_t version, bool last,
    std::vector<client::SparsePush> rows,
    std::vector<client::SparsePull> next_rows) {
  PS_ASSIGN_OR_RETURN(Ended ended, Drain());
  // The first step (or the first after a Drain): the same weights.
  if (ended.next_version < 0) ended.next_version = version;
  // This step's gradient goes out from the spare buffers (the previous
  // step's push, which read them, is over); the model backpropagates the
  // next step into the ones they held.
  const bool direct = staging_->direct();
  for (int i = 0; i < model_->num_parameters(); ++i) {
    PS_RETURN_IF_ERROR(direct ? model_->SwapGradientBuffer(i, spare_grads_[i])
                              : model_->GetGradientRange(
                                    i, 0, absl::MakeSpan(host_grads_[i])));
  }
  std::vector<absl::Span<const float>> grads;
  std::vector<absl::Span<float>> next;
  for (int i = 0; i < model_->num_parameters(); ++i) {
    const int64_t n = model_->parameters()[i].size;
    grads.push_back(
        absl::MakeConstSpan(direct ? static_cast<float*>(spare_grads_[i].data())
                                   : host_grads_[i].data(),
                            n));
    next.push_back(
        absl::MakeSpan(direct ? static_cast<float*>(spare_weights_[i].data())
                              : host_weights_[i].data(),
                       n));
  }
  client::StepArgs end;
  end.clock = clock;
  end.base_version = version;
  end.dense = client::WholeTensors(grads);
  end.rows = std::move(rows);
  end.next_rows = std::move(next_rows);
  // The gradients travel with the end of step; the last one is waited for.
  if (!last) {
    end.next_weights = std::move(next);
    in_flight_ = params_->EndStep(std::move(end));
    return ended;
  }
  PS_ASSIGN_OR_RETURN(const client::CallResult last_ended,
                      params_->EndStep(std::move(end)).Wait());
  ended.staleness += static_cast<double>(last_ended.staleness);
  ended.staleness_ends++;
  return ended;
}

}  // namespace ps::worker
