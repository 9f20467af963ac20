#include "worker/model/sparse_batch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace ps::worker::model {
namespace {

template <typename T>
absl::Status Grow(kernels::Backend& b, kernels::DeviceBuffer& buf,
                  int64_t count) {
  count = std::max<int64_t>(count, 1);
  if (buf.bytes() >= count * static_cast<int64_t>(sizeof(T))) {
    return absl::OkStatus();
  }
  PS_ASSIGN_OR_RETURN(buf, b.AllocateArray<T>(count));
  return absl::OkStatus();
}

template <typename T>
absl::Status Upload(kernels::Backend& b, const std::vector<T>& host,
                    kernels::DeviceBuffer& buf) {
  PS_RETURN_IF_ERROR(Grow<T>(b, buf, static_cast<int64_t>(host.size())));
  if (host.empty()) return absl::OkStatus();
  return b.CopyToDevice(host.data(), buf.data(),
                        static_cast<int64_t>(host.size() * sizeof(T)));
}

const data::SparseField* FindField(const data::Batch& batch,
                                   const std::string& name) {
  for (const data::SparseField& f : batch.sparse) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace

absl::Status SparseBatch::Load(kernels::Backend& b, const data::Batch& batch) {
  tables_data_.resize(tables_.size());
  uses_data_.resize(uses_.size());
  std::vector<const data::SparseField*> fields;
  for (const FieldUse& u : uses_) {
    const data::SparseField* f = FindField(batch, u.field);
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("the batch has no sparse field '", u.field, "'"));
    }
    if (u.weighted && f->weights.size() != f->keys.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse field '", u.field,
          "' has no per-id weights, which a weighted embedding bag needs"));
    }
    fields.push_back(f);
  }
  // Each table's unique keys, ascending.
  for (int t = 0; t < num_tables(); ++t) {
    std::vector<uint64_t>& keys = tables_data_[t].keys;
    keys.clear();
    for (size_t u = 0; u < uses_.size(); ++u) {
      if (uses_[u].table != t) continue;
      keys.insert(keys.end(), fields[u]->keys.begin(), fields[u]->keys.end());
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    const int64_t values = static_cast<int64_t>(keys.size()) * tables_[t].dim;
    PS_RETURN_IF_ERROR(Grow<float>(b, tables_data_[t].rows, values));
    PS_RETURN_IF_ERROR(Grow<float>(b, tables_data_[t].grads, values));
    PS_RETURN_IF_ERROR(Grow<float>(b, scratch_, values));
    if (values > 0) {
      PS_RETURN_IF_ERROR(
          b.Fill(0.0f, tables_data_[t].grads.Span<float>(values)));
    }
  }
  for (size_t u = 0; u < uses_.size(); ++u) {
    const data::SparseField& f = *fields[u];
    const std::vector<uint64_t>& keys = tables_data_[uses_[u].table].keys;
    std::vector<int32_t> indices(f.keys.size());
    for (size_t i = 0; i < f.keys.size(); ++i) {
      indices[i] = static_cast<int32_t>(
          std::lower_bound(keys.begin(), keys.end(), f.keys[i]) - keys.begin());
    }
    UseData& d = uses_data_[u];
    d.nnz = static_cast<int64_t>(indices.size());
    d.bags = static_cast<int64_t>(f.offsets.size()) - 1;
    d.has_weights = uses_[u].weighted;
    PS_RETURN_IF_ERROR(Upload(b, indices, d.indices));
    PS_RETURN_IF_ERROR(Upload(b, f.offsets, d.offsets));
    if (d.has_weights) PS_RETURN_IF_ERROR(Upload(b, f.weights, d.weights));
  }
  return absl::OkStatus();
}

absl::Status SparseBatch::SetRows(kernels::Backend& b, int t,
                                  absl::Span<const float> rows) {
  const int64_t values = static_cast<int64_t>(keys(t).size()) * tables_[t].dim;
  if (static_cast<int64_t>(rows.size()) != values) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", tables_[t].name, "': the batch's ", keys(t).size(),
        " keys need ", values, " values, got ", rows.size()));
  }
  if (values == 0) return absl::OkStatus();
  return b.CopyToDevice(rows.data(), tables_data_[t].rows.data(),
                        values * static_cast<int64_t>(sizeof(float)));
}

absl::Status SparseBatch::GetGradient(kernels::Backend& b, int t,
                                      absl::Span<float> rows) {
  const int64_t values = static_cast<int64_t>(keys(t).size()) * tables_[t].dim;
  if (static_cast<int64_t>(rows.size()) != values) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", tables_[t].name, "': the batch's ", keys(t).size(),
        " keys have ", values, " gradient values, the buffer ", rows.size()));
  }
  if (values == 0) return absl::OkStatus();
  return b.CopyToHost(tables_data_[t].grads.data(), rows.data(),
                      values * static_cast<int64_t>(sizeof(float)));
}

kernels::DeviceMatrix<const float> SparseBatch::rows(int t) const {
  return tables_data_[t].rows.Matrix<float>(
      static_cast<int64_t>(keys(t).size()), tables_[t].dim);
}
kernels::DeviceMatrix<float> SparseBatch::gradient(int t) const {
  return tables_data_[t].grads.Matrix<float>(
      static_cast<int64_t>(keys(t).size()), tables_[t].dim);
}
kernels::DeviceMatrix<float> SparseBatch::scratch(int t) const {
  return scratch_.Matrix<float>(static_cast<int64_t>(keys(t).size()),
                                tables_[t].dim);
}
kernels::DeviceSpan<const int32_t> SparseBatch::indices(int u) const {
  return uses_data_[u].indices.Span<int32_t>(uses_data_[u].nnz);
}
kernels::DeviceSpan<const int32_t> SparseBatch::offsets(int u) const {
  return uses_data_[u].offsets.Span<int32_t>(uses_data_[u].bags + 1);
}
std::optional<kernels::DeviceSpan<const float>> SparseBatch::weights(
    int u) const {
  if (!uses_data_[u].has_weights) return std::nullopt;
  return uses_data_[u].weights.Span<float>(uses_data_[u].nnz);
}

int SparseBatch::FindUse(const std::string& field, int table,
                         bool weighted) const {
  for (size_t u = 0; u < uses_.size(); ++u) {
    if (uses_[u].field == field && uses_[u].table == table &&
        uses_[u].weighted == weighted) {
      return static_cast<int>(u);
    }
  }
  return -1;
}

}  // namespace ps::worker::model
