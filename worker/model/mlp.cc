#include "worker/model/mlp.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ps::worker::model {

using kernels::Activation;
using kernels::Backend;
using kernels::DeviceBuffer;
using kernels::DeviceMatrix;
using kernels::DeviceSpan;
using kernels::Initializer;
using kernels::Transpose;

Mlp::Mlp(Backend* backend, const MlpOptions& options)
    : backend_(backend),
      sizes_(options.layer_sizes),
      activation_(options.activation) {
  for (int i = 0; i < num_layers(); ++i) {
    info_.push_back({absl::StrCat("fc", i, "/weight"),
                     {sizes_[i], sizes_[i + 1]},
                     sizes_[i] * sizes_[i + 1]});
    info_.push_back(
        {absl::StrCat("fc", i, "/bias"), {sizes_[i + 1]}, sizes_[i + 1]});
  }
}

Mlp::~Mlp() = default;

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(Backend* backend,
                                                 const MlpOptions& options) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("Mlp: backend is null");
  }
  if (options.layer_sizes.size() < 2) {
    return absl::InvalidArgumentError(
        "Mlp: layer_sizes needs at least an input and an output size");
  }
  for (int64_t size : options.layer_sizes) {
    if (size <= 0 || size > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Mlp: layer size ", size, " is outside [1, 2^24]"));
    }
  }
  if (options.activation != Activation::kRelu &&
      options.activation != Activation::kTanh) {
    return absl::InvalidArgumentError("Mlp: unknown activation");
  }
  auto mlp = std::unique_ptr<Mlp>(new Mlp(backend, options));
  PS_RETURN_IF_ERROR(mlp->Allocate());
  return mlp;
}

absl::Status Mlp::Allocate() {
  for (const ParameterInfo& p : info_) {
    absl::StatusOr<DeviceBuffer> param = backend_->AllocateArray<float>(p.size);
    if (!param.ok()) return param.status();
    absl::StatusOr<DeviceBuffer> grad = backend_->AllocateArray<float>(p.size);
    if (!grad.ok()) return grad.status();
    PS_RETURN_IF_ERROR(backend_->Fill(0.0f, param->Span<float>(p.size)));
    PS_RETURN_IF_ERROR(backend_->Fill(0.0f, grad->Span<float>(p.size)));
    params_.push_back(*std::move(param));
    grads_.push_back(*std::move(grad));
  }
  absl::StatusOr<DeviceBuffer> loss = backend_->AllocateArray<float>(1);
  if (!loss.ok()) return loss.status();
  loss_ = *std::move(loss);
  return absl::OkStatus();
}

absl::Status Mlp::EnsureBatchCapacity(int64_t batch) {
  if (batch <= capacity_) return absl::OkStatus();
  const int64_t max_width = *std::max_element(sizes_.begin(), sizes_.end());
  std::vector<DeviceBuffer> acts;
  for (int64_t size : sizes_) {
    absl::StatusOr<DeviceBuffer> b =
        backend_->AllocateArray<float>(batch * size);
    if (!b.ok()) return b.status();
    acts.push_back(*std::move(b));
  }
  DeviceBuffer delta[2];
  for (DeviceBuffer& d : delta) {
    absl::StatusOr<DeviceBuffer> b =
        backend_->AllocateArray<float>(batch * max_width);
    if (!b.ok()) return b.status();
    d = *std::move(b);
  }
  absl::StatusOr<DeviceBuffer> labels = backend_->AllocateArray<int32_t>(batch);
  if (!labels.ok()) return labels.status();
  absl::StatusOr<DeviceBuffer> argmax = backend_->AllocateArray<int32_t>(batch);
  if (!argmax.ok()) return argmax.status();
  acts_ = std::move(acts);
  delta_[0] = std::move(delta[0]);
  delta_[1] = std::move(delta[1]);
  labels_ = *std::move(labels);
  argmax_ = *std::move(argmax);
  capacity_ = batch;
  return absl::OkStatus();
}

int Mlp::FindParameter(std::string_view name) const {
  for (int i = 0; i < num_parameters(); ++i) {
    if (info_[i].name == name) return i;
  }
  return -1;
}

absl::Status Mlp::CheckIndex(int index) const {
  if (index < 0 || index >= num_parameters()) {
    return absl::InvalidArgumentError(absl::StrCat("Mlp: parameter index ",
                                                   index, " outside [0, ",
                                                   num_parameters(), ")"));
  }
  return absl::OkStatus();
}

absl::Status Mlp::InitializeParameters(uint64_t seed) {
  const Initializer kind = activation_ == Activation::kTanh
                               ? Initializer::kXavierUniform
                               : Initializer::kHeUniform;
  for (int i = 0; i < num_parameters(); ++i) {
    const ParameterInfo& p = info_[i];
    DeviceSpan<float> dst = params_[i].Span<float>(p.size);
    if (p.shape.size() == 2) {
      PS_RETURN_IF_ERROR(
          backend_->Initialize(kind, seed + i, p.shape[0], p.shape[1], dst));
    } else {
      PS_RETURN_IF_ERROR(backend_->Fill(0.0f, dst));
    }
  }
  return absl::OkStatus();
}

absl::Status Mlp::SetParameter(int index, absl::Span<const float> host) {
  PS_RETURN_IF_ERROR(CheckIndex(index));
  const ParameterInfo& p = info_[index];
  if (static_cast<int64_t>(host.size()) != p.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Mlp: ", p.name, " has ", p.size, " elements, got ", host.size()));
  }
  return backend_->CopyToDevice(host.data(), params_[index].data(),
                                p.size * static_cast<int64_t>(sizeof(float)));
}

absl::Status Mlp::SetParameterFromDevice(int index,
                                         DeviceSpan<const float> src) {
  PS_RETURN_IF_ERROR(CheckIndex(index));
  const ParameterInfo& p = info_[index];
  if (src.size != p.size || src.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Mlp: ", p.name, " has ", p.size, " elements, got a device span of ",
        src.size, src.data == nullptr ? " (null)" : ""));
  }
  return backend_->CopyOnDevice(src.data, params_[index].data(),
                                p.size * static_cast<int64_t>(sizeof(float)));
}

absl::Status Mlp::GetParameter(int index, absl::Span<float> host) {
  PS_RETURN_IF_ERROR(CheckIndex(index));
  const ParameterInfo& p = info_[index];
  if (static_cast<int64_t>(host.size()) != p.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Mlp: ", p.name, " has ", p.size, " elements, got ", host.size()));
  }
  return backend_->CopyToHost(params_[index].data(), host.data(),
                              p.size * static_cast<int64_t>(sizeof(float)));
}

DeviceSpan<float> Mlp::parameter(int index) {
  if (index < 0 || index >= num_parameters()) return {};
  return params_[index].Span<float>(info_[index].size);
}

DeviceSpan<const float> Mlp::gradient(int index) const {
  if (index < 0 || index >= num_parameters()) return {};
  return grads_[index].Span<float>(info_[index].size);
}

absl::Status Mlp::GetGradient(int index, absl::Span<float> host) {
  PS_RETURN_IF_ERROR(CheckIndex(index));
  const ParameterInfo& p = info_[index];
  if (static_cast<int64_t>(host.size()) != p.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Mlp: gradient of ", p.name, " has ", p.size,
                     " elements, got ", host.size()));
  }
  return backend_->CopyToHost(grads_[index].data(), host.data(),
                              p.size * static_cast<int64_t>(sizeof(float)));
}

absl::Status Mlp::SwapBuffer(std::vector<DeviceBuffer>& buffers, int index,
                             DeviceBuffer& other, const char* what) {
  PS_RETURN_IF_ERROR(CheckIndex(index));
  if (other.data() == nullptr ||
      other.bytes() < info_[index].size * static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Mlp: a buffer of ", other.bytes(), " bytes cannot hold ", what,
        info_[index].name, " (", info_[index].size, " floats)"));
  }
  std::swap(buffers[index], other);
  return absl::OkStatus();
}

absl::Status Mlp::SwapParameterBuffer(int index, DeviceBuffer& other) {
  return SwapBuffer(params_, index, other, "");
}

absl::Status Mlp::SwapGradientBuffer(int index, DeviceBuffer& other) {
  return SwapBuffer(grads_, index, other, "the gradient of ");
}

absl::Status Mlp::CheckRange(int index, int64_t offset, size_t size) const {
  PS_RETURN_IF_ERROR(CheckIndex(index));
  const ParameterInfo& p = info_[index];
  if (offset < 0 || offset > p.size ||
      static_cast<int64_t>(size) > p.size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("Mlp: elements [", offset, ", ", offset + size, ") of ",
                     p.name, " are outside its ", p.size));
  }
  return absl::OkStatus();
}

absl::Status Mlp::SetParameterRange(int index, int64_t offset,
                                    absl::Span<const float> host) {
  PS_RETURN_IF_ERROR(CheckRange(index, offset, host.size()));
  if (host.empty()) return absl::OkStatus();
  return backend_->CopyToDevice(
      host.data(), params_[index].Span<float>(info_[index].size).data + offset,
      static_cast<int64_t>(host.size() * sizeof(float)));
}

absl::Status Mlp::GetGradientRange(int index, int64_t offset,
                                   absl::Span<float> host) {
  PS_RETURN_IF_ERROR(CheckRange(index, offset, host.size()));
  if (host.empty()) return absl::OkStatus();
  return backend_->CopyToHost(
      grads_[index].Span<float>(info_[index].size).data + offset, host.data(),
      static_cast<int64_t>(host.size() * sizeof(float)));
}

absl::StatusOr<int64_t> Mlp::LoadBatch(absl::Span<const float> images,
                                       absl::Span<const int32_t> labels) {
  const int64_t batch = static_cast<int64_t>(labels.size());
  if (batch == 0) return absl::InvalidArgumentError("Mlp: empty batch");
  if (static_cast<int64_t>(images.size()) != batch * sizes_.front()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Mlp: ", batch, " labels need ", batch * sizes_.front(),
                     " image values, got ", images.size()));
  }
  const int64_t classes = sizes_.back();
  for (int64_t r = 0; r < batch; ++r) {
    if (labels[r] < 0 || labels[r] >= classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("Mlp: label ", labels[r], " of example ", r,
                       " is outside [0, ", classes, ")"));
    }
  }
  PS_RETURN_IF_ERROR(EnsureBatchCapacity(batch));
  PS_RETURN_IF_ERROR(backend_->CopyToDevice(
      images.data(), acts_[0].data(),
      static_cast<int64_t>(images.size() * sizeof(float))));
  PS_RETURN_IF_ERROR(backend_->CopyToDevice(
      labels.data(), labels_.data(),
      static_cast<int64_t>(labels.size() * sizeof(int32_t))));
  return batch;
}

absl::StatusOr<std::vector<int64_t>> Mlp::RowBlocks(
    const std::vector<int64_t>& splits) const {
  std::vector<int64_t> blocks = {0};
  for (int64_t r : splits) {
    if (r <= blocks.back() || r >= sizes_[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Mlp: first_weight_row_splits must ascend inside (0, ",
                       sizes_[0], "), got ", r, " after ", blocks.back()));
    }
    blocks.push_back(r);
  }
  blocks.push_back(sizes_[0]);
  return blocks;
}

absl::Status Mlp::Forward(int64_t batch, const StepHooks* hooks,
                          const std::vector<int64_t>& blocks) {
  auto use = [&](int index, int64_t begin, int64_t end) {
    return hooks != nullptr && hooks->before_use
               ? hooks->before_use(index, begin, end)
               : absl::OkStatus();
  };
  for (int i = 0; i < num_layers(); ++i) {
    DeviceMatrix<const float> in = acts_[i].Matrix<float>(batch, sizes_[i]);
    DeviceMatrix<float> out = acts_[i + 1].Matrix<float>(batch, sizes_[i + 1]);
    DeviceMatrix<const float> w =
        params_[2 * i].Matrix<float>(sizes_[i], sizes_[i + 1]);
    DeviceSpan<const float> b = params_[2 * i + 1].Span<float>(sizes_[i + 1]);
    if (i == 0 && blocks.size() > 2) {
      // out = sum over the row blocks of X[:, rows] W[rows, :].
      const int64_t width = sizes_[1];
      for (size_t k = 0; k + 1 < blocks.size(); ++k) {
        const int64_t r0 = blocks[k], r1 = blocks[k + 1];
        PS_RETURN_IF_ERROR(use(0, r0 * width, r1 * width));
        PS_RETURN_IF_ERROR(backend_->Gemm(
            Transpose::kNo, Transpose::kNo, 1.0f,
            DeviceMatrix<const float>(in.data + r0, batch, r1 - r0, sizes_[0]),
            DeviceMatrix<const float>(w.data + r0 * width, r1 - r0, width),
            k == 0 ? 0.0f : 1.0f, out));
      }
    } else {
      PS_RETURN_IF_ERROR(use(2 * i, 0, w.size()));
      PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kNo, 1.0f,
                                        in, w, 0.0f, out));
    }
    PS_RETURN_IF_ERROR(use(2 * i + 1, 0, b.size));
    PS_RETURN_IF_ERROR(backend_->BiasAdd(b, out));
    if (i + 1 < num_layers()) {
      PS_RETURN_IF_ERROR(
          backend_->ActivationForward(activation_, out.flat(), out.flat()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float> Mlp::TrainStep(absl::Span<const float> images,
                                     absl::Span<const int32_t> labels,
                                     const GradientReadyFn& on_gradient_ready) {
  StepHooks hooks;
  hooks.on_gradient_ready = on_gradient_ready;
  return TrainStep(images, labels, hooks);
}

absl::StatusOr<float> Mlp::TrainStep(absl::Span<const float> images,
                                     absl::Span<const int32_t> labels,
                                     const StepHooks& hooks) {
  absl::StatusOr<std::vector<int64_t>> blocks_or =
      RowBlocks(hooks.first_weight_row_splits);
  if (!blocks_or.ok()) return blocks_or.status();
  const std::vector<int64_t> blocks = *std::move(blocks_or);
  absl::StatusOr<int64_t> batch_or = LoadBatch(images, labels);
  if (!batch_or.ok()) return batch_or.status();
  const int64_t batch = *batch_or;
  PS_RETURN_IF_ERROR(Forward(batch, &hooks, blocks));

  const int last = num_layers() - 1;
  int cur = 0;
  DeviceMatrix<float> dz = delta_[cur].Matrix<float>(batch, sizes_.back());
  PS_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(
      acts_[last + 1].Matrix<float>(batch, sizes_.back()),
      labels_.Span<int32_t>(batch), loss_.Span<float>(1), dz));
  if (hooks.before_backward) {
    PS_RETURN_IF_ERROR(hooks.before_backward());
  }
  auto part = [&](int index, int64_t begin, int64_t end) {
    if (hooks.on_gradient_part) hooks.on_gradient_part(index, begin, end);
  };
  auto ready = [&](int index) {
    if (hooks.on_gradient_ready) hooks.on_gradient_ready(index);
  };

  for (int i = last; i >= 0; --i) {
    DeviceMatrix<const float> in = acts_[i].Matrix<float>(batch, sizes_[i]);
    DeviceMatrix<float> dw =
        grads_[2 * i].Matrix<float>(sizes_[i], sizes_[i + 1]);
    // dW = in^T dz (block by block of rows for the first layer); db =
    // column sums of dz.
    if (i == 0 && blocks.size() > 2) {
      const int64_t width = sizes_[1];
      for (size_t k = 0; k + 1 < blocks.size(); ++k) {
        const int64_t r0 = blocks[k], r1 = blocks[k + 1];
        PS_RETURN_IF_ERROR(backend_->Gemm(
            Transpose::kYes, Transpose::kNo, 1.0f,
            DeviceMatrix<const float>(in.data + r0, batch, r1 - r0, sizes_[0]),
            dz, 0.0f,
            DeviceMatrix<float>(dw.data + r0 * width, r1 - r0, width)));
        part(0, r0 * width, r1 * width);
      }
    } else {
      PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kYes, Transpose::kNo, 1.0f,
                                        in, dz, 0.0f, dw));
    }
    PS_RETURN_IF_ERROR(
        backend_->BiasGrad(dz, grads_[2 * i + 1].Span<float>(sizes_[i + 1])));
    DeviceMatrix<float> din;
    if (i > 0) {
      // d(in) = dz W^T, then through the activation that produced `in`;
      // before the gradients are handed out, as it is the step's last read
      // of W (a worker may then overwrite it with the next step's weights).
      din = delta_[1 - cur].Matrix<float>(batch, sizes_[i]);
      PS_RETURN_IF_ERROR(backend_->Gemm(
          Transpose::kNo, Transpose::kYes, 1.0f, dz,
          params_[2 * i].Matrix<float>(sizes_[i], sizes_[i + 1]), 0.0f, din));
      PS_RETURN_IF_ERROR(backend_->ActivationBackward(activation_, in.flat(),
                                                      din.flat(), din.flat()));
    }
    if (i > 0 || blocks.size() <= 2) part(2 * i, 0, dw.size());
    ready(2 * i);
    part(2 * i + 1, 0, sizes_[i + 1]);
    ready(2 * i + 1);
    if (i == 0) break;  // no gradient for the input
    cur = 1 - cur;
    dz = din;
  }
  float loss = 0.0f;
  PS_RETURN_IF_ERROR(backend_->CopyToHost(loss_.data(), &loss, sizeof(loss)));
  return loss;
}

absl::StatusOr<Mlp::Evaluation> Mlp::Evaluate(
    absl::Span<const float> images, absl::Span<const int32_t> labels) {
  absl::StatusOr<int64_t> batch_or = LoadBatch(images, labels);
  if (!batch_or.ok()) return batch_or.status();
  const int64_t batch = *batch_or;
  PS_RETURN_IF_ERROR(Forward(batch));
  DeviceMatrix<const float> logits =
      acts_.back().Matrix<float>(batch, sizes_.back());
  PS_RETURN_IF_ERROR(
      backend_->SoftmaxCrossEntropy(logits, labels_.Span<int32_t>(batch),
                                    loss_.Span<float>(1), std::nullopt));
  PS_RETURN_IF_ERROR(backend_->Argmax(logits, argmax_.Span<int32_t>(batch)));
  std::vector<int32_t> predicted(static_cast<size_t>(batch));
  PS_RETURN_IF_ERROR(
      backend_->CopyToHost(argmax_.data(), predicted.data(),
                           batch * static_cast<int64_t>(sizeof(int32_t))));
  Evaluation eval;
  PS_RETURN_IF_ERROR(
      backend_->CopyToHost(loss_.data(), &eval.loss, sizeof(eval.loss)));
  eval.examples = batch;
  for (int64_t r = 0; r < batch; ++r) {
    if (predicted[r] == labels[r]) ++eval.correct;
  }
  return eval;
}

}  // namespace ps::worker::model
