#include "worker/model/sparse_batch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

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
  // The batch loaded last again (a step's keys were named before the
  // step, and the step loads them once more): only the gradients restart.
  bool same = loaded_.size() == uses_.size();
  for (size_t u = 0; same && u < uses_.size(); ++u) {
    same = loaded_[u].keys == fields[u]->keys &&
           loaded_[u].offsets == fields[u]->offsets &&
           loaded_[u].weights == fields[u]->weights;
  }
  if (same) return ZeroGradients(b);
  loaded_.clear();
  // Each table's unique keys, ascending, and each use's key positions as
  // indices into them: the keys of all the table's uses deduplicated by
  // hash (worker/client/unique_keys.h), then only the unique keys sorted.
  host_indices_.resize(uses_.size());
  for (int t = 0; t < num_tables(); ++t) {
    all_keys_.clear();
    for (size_t u = 0; u < uses_.size(); ++u) {
      if (uses_[u].table != t) continue;
      all_keys_.insert(all_keys_.end(), fields[u]->keys.begin(),
                       fields[u]->keys.end());
    }
    dedup_.Deduplicate(all_keys_, &unique_);
    const size_t n = unique_.keys.size();
    by_key_.resize(n);
    for (size_t j = 0; j < n; ++j) {
      by_key_[j] = {unique_.keys[j], static_cast<int32_t>(j)};
    }
    std::sort(by_key_.begin(), by_key_.end());
    std::vector<uint64_t>& keys = tables_data_[t].keys;
    keys.resize(n);
    rank_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      keys[r] = by_key_[r].first;
      rank_[by_key_[r].second] = static_cast<int32_t>(r);
    }
    size_t at = 0;  // the use's first position in all_keys_
    for (size_t u = 0; u < uses_.size(); ++u) {
      if (uses_[u].table != t) continue;
      const size_t count = fields[u]->keys.size();
      std::vector<int32_t>& indices = host_indices_[u];
      indices.resize(count);
      for (size_t i = 0; i < count; ++i) {
        indices[i] = rank_[unique_.inverse[at + i]];
      }
      at += count;
    }
    const int64_t values = static_cast<int64_t>(n) * tables_[t].dim;
    PS_RETURN_IF_ERROR(Grow<float>(b, tables_data_[t].rows, values));
    PS_RETURN_IF_ERROR(Grow<float>(b, tables_data_[t].grads, values));
    PS_RETURN_IF_ERROR(Grow<float>(b, scratch_, values));
  }
  PS_RETURN_IF_ERROR(ZeroGradients(b));
  for (size_t u = 0; u < uses_.size(); ++u) {
    const data::SparseField& f = *fields[u];
    const std::vector<int32_t>& indices = host_indices_[u];
    UseData& d = uses_data_[u];
    d.nnz = static_cast<int64_t>(indices.size());
    d.bags = static_cast<int64_t>(f.offsets.size()) - 1;
    d.has_weights = uses_[u].weighted;
    PS_RETURN_IF_ERROR(Upload(b, indices, d.indices));
    PS_RETURN_IF_ERROR(Upload(b, f.offsets, d.offsets));
    if (d.has_weights) PS_RETURN_IF_ERROR(Upload(b, f.weights, d.weights));
  }
  // Remembered only once everything is in place.
  for (const data::SparseField* f : fields) {
    loaded_.push_back({f->keys, f->offsets, f->weights});
  }
  return absl::OkStatus();
}

absl::Status SparseBatch::ZeroGradients(kernels::Backend& b) {
  for (int t = 0; t < num_tables(); ++t) {
    const int64_t values =
        static_cast<int64_t>(tables_data_[t].keys.size()) * tables_[t].dim;
    if (values > 0) {
      PS_RETURN_IF_ERROR(
          b.Fill(0.0f, tables_data_[t].grads.Span<float>(values)));
    }
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
