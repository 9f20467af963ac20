#include "worker/client/local_parameter_access.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::client {
namespace {

// splitmix64: a well-mixed 64-bit hash.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

LocalParameterAccess::LocalParameterAccess(
    std::vector<std::vector<float>> dense,
    std::vector<LocalTableOptions> tables, float learning_rate, uint64_t seed,
    std::vector<std::vector<int64_t>> boundaries)
    : dense_(std::move(dense)),
      learning_rate_(learning_rate),
      seed_(seed),
      boundaries_(std::move(boundaries)) {
  for (LocalTableOptions& t : tables) tables_.push_back({std::move(t), {}});
}

std::vector<int64_t> LocalParameterAccess::PartBoundaries(int index) const {
  if (index < 0 || index >= static_cast<int>(boundaries_.size())) return {};
  return boundaries_[index];
}

absl::Status LocalParameterAccess::ReadDense(
    const std::vector<absl::Span<float>>& tensors) {
  if (tensors.size() != dense_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull of ", tensors.size(), " tensors; the model has ", dense_.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].size() != dense_[i].size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " has ", dense_[i].size(),
                       " values; the buffer ", tensors[i].size()));
    }
    std::copy(dense_[i].begin(), dense_[i].end(), tensors[i].begin());
  }
  return absl::OkStatus();
}

Handle LocalParameterAccess::Pull(PullArgs request) {
  absl::Status s;
  if (!request.tensors.empty()) {
    s = ReadDense(request.tensors);
    ++dense_pulls_;
  }
  if (s.ok() && !request.rows.empty()) {
    s = ReadRows(request.rows);
    ++row_pulls_;
  }
  if (!s.ok()) return Handle(s);
  return Handle(CallResult{.version = steps_ended_});
}

absl::Status LocalParameterAccess::ApplyDense(const TensorGrad& g) {
  const int index = g.tensor_index;
  if (index < 0 || index >= static_cast<int>(dense_.size()) || g.offset < 0 ||
      g.offset + g.grad.size() > dense_[index].size() ||
      (g.offset == 0 && g.grad.size() != dense_[index].size() &&
       PartBoundaries(index).empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("push to tensor ", index, " of ", g.grad.size(),
                     " values at offset ", g.offset));
  }
  float* w = dense_[index].data() + g.offset;
  for (size_t i = 0; i < g.grad.size(); ++i) w[i] -= learning_rate_ * g.grad[i];
  return absl::OkStatus();
}

absl::Status LocalParameterAccess::Push(StepArgs request) {
  for (const TensorGrad& g : request.dense) {
    PS_RETURN_IF_ERROR(ApplyDense(g));
    if (static_cast<size_t>(g.tensor_index) < request.next_weights.size()) {
      const std::vector<float>& w = dense_[g.tensor_index];
      absl::Span<float> out = request.next_weights[g.tensor_index];
      if (out.size() != w.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("next weights of tensor ", g.tensor_index, ": ",
                         out.size(), " values; the tensor has ", w.size()));
      }
      std::copy(w.begin() + g.offset, w.begin() + g.offset + g.grad.size(),
                out.begin() + g.offset);
    }
  }
  for (const SparsePush& p : request.rows) PS_RETURN_IF_ERROR(ApplyRows(p));
  if (!request.next_rows.empty()) {
    PS_RETURN_IF_ERROR(ReadRows(request.next_rows));
    ++pushes_with_rows_;
  }
  return absl::OkStatus();
}

Handle LocalParameterAccess::EndStep(StepArgs request) {
  std::vector<absl::Span<float>> next = std::move(request.next_weights);
  absl::Status s = Push(std::move(request));
  if (!s.ok()) return Handle(s);
  ++steps_ended_;
  if (!next.empty()) {
    s = ReadDense(next);
    if (!s.ok()) return Handle(s);
  }
  return Handle(CallResult{.version = next.empty() ? 0 : steps_ended_});
}

absl::StatusOr<LocalParameterAccess::Table*> LocalParameterAccess::TableFor(
    int table, size_t keys, size_t values) {
  if (table < 0 || table >= static_cast<int>(tables_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparse table ", table, " outside [0, ", tables_.size(), ")"));
  }
  Table& t = tables_[table];
  if (values != keys * static_cast<size_t>(t.options.dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", t.options.name, "': ", keys, " keys of dim ", t.options.dim,
        " need ", keys * t.options.dim, " values, got ", values));
  }
  return &t;
}

std::vector<float>& LocalParameterAccess::Row(int table, Table& t,
                                              uint64_t key) {
  auto [it, inserted] = t.rows.try_emplace(key);
  if (inserted) {
    it->second.resize(static_cast<size_t>(t.options.dim));
    uint64_t h = Mix(seed_ ^ Mix(static_cast<uint64_t>(table) ^ Mix(key)));
    for (float& v : it->second) {
      h = Mix(h);
      // 24 random bits -> [-1, 1).
      const float u = static_cast<float>(h >> 40) / float(1 << 23) - 1.0f;
      v = u * t.options.init_scale;
    }
  }
  return it->second;
}

absl::Status LocalParameterAccess::ReadRows(
    const std::vector<SparsePull>& pulls) {
  for (const SparsePull& p : pulls) {
    PS_ASSIGN_OR_RETURN(Table * t,
                        TableFor(p.table, p.keys.size(), p.rows.size()));
    const size_t dim = static_cast<size_t>(t->options.dim);
    for (size_t i = 0; i < p.keys.size(); ++i) {
      const std::vector<float>& row = Row(p.table, *t, p.keys[i]);
      std::copy(row.begin(), row.end(), p.rows.begin() + i * dim);
    }
  }
  return absl::OkStatus();
}

absl::Status LocalParameterAccess::ApplyRows(const SparsePush& p) {
  PS_ASSIGN_OR_RETURN(Table * t,
                      TableFor(p.table, p.keys.size(), p.grads.size()));
  const size_t dim = static_cast<size_t>(t->options.dim);
  for (size_t i = 0; i < p.keys.size(); ++i) {
    std::vector<float>& row = Row(p.table, *t, p.keys[i]);
    for (size_t d = 0; d < dim; ++d) {
      row[d] -= learning_rate_ * p.grads[i * dim + d];
    }
  }
  ++sparse_pushes_;
  return absl::OkStatus();
}

}  // namespace ps::client
