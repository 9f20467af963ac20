#include "worker/local_parameter_access.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/platform/status.h"

namespace ps::worker {
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
    std::vector<LocalTableOptions> tables, float learning_rate, uint64_t seed)
    : dense_(std::move(dense)), learning_rate_(learning_rate), seed_(seed) {
  for (LocalTableOptions& t : tables) tables_.push_back({std::move(t), {}});
}

absl::StatusOr<int64_t> LocalParameterAccess::Pull(
    int64_t, std::vector<absl::Span<float>> tensors) {
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
  return finishes_;
}

absl::Status LocalParameterAccess::Push(int64_t, int64_t, int index,
                                        absl::Span<const float> grad) {
  if (index < 0 || index >= static_cast<int>(dense_.size()) ||
      grad.size() != dense_[index].size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("push to tensor ", index, " of ", grad.size(), " values"));
  }
  std::vector<float>& w = dense_[index];
  for (size_t i = 0; i < w.size(); ++i) w[i] -= learning_rate_ * grad[i];
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LocalParameterAccess::Finish(int64_t) {
  ++finishes_;
  return 0;
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

absl::Status LocalParameterAccess::PullSparse(int64_t, int table,
                                              absl::Span<const uint64_t> keys,
                                              absl::Span<float> rows) {
  ++sparse_pulls_;
  return ReadRows(table, keys, rows);
}

absl::Status LocalParameterAccess::ReadRows(int table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<float> rows) {
  PS_ASSIGN_OR_RETURN(Table * t, TableFor(table, keys.size(), rows.size()));
  const size_t dim = static_cast<size_t>(t->options.dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float>& row = Row(table, *t, keys[i]);
    std::copy(row.begin(), row.end(), rows.begin() + i * dim);
  }
  return absl::OkStatus();
}

absl::Status LocalParameterAccess::PushSparse(int64_t, int64_t, int table,
                                              absl::Span<const uint64_t> keys,
                                              absl::Span<const float> grads) {
  PS_ASSIGN_OR_RETURN(Table * t, TableFor(table, keys.size(), grads.size()));
  const size_t dim = static_cast<size_t>(t->options.dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<float>& row = Row(table, *t, keys[i]);
    for (size_t d = 0; d < dim; ++d) {
      row[d] -= learning_rate_ * grads[i * dim + d];
    }
  }
  ++sparse_pushes_;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LocalParameterAccess::PullRows(
    int64_t, std::vector<client::SparsePull> pulls) {
  for (const client::SparsePull& p : pulls) {
    PS_RETURN_IF_ERROR(ReadRows(p.table, p.keys, p.rows));
  }
  ++row_pulls_;
  return finishes_;
}

absl::Status LocalParameterAccess::PushRows(
    int64_t clock, int64_t base_version,
    std::vector<client::SparsePush> grads) {
  for (const client::SparsePush& g : grads) {
    PS_RETURN_IF_ERROR(
        PushSparse(clock, base_version, g.table, g.keys, g.grads));
  }
  return absl::OkStatus();
}

absl::Status LocalParameterAccess::PushRowsAndPull(
    int64_t clock, int64_t base_version, std::vector<client::SparsePush> grads,
    std::vector<client::SparsePull> next) {
  PS_RETURN_IF_ERROR(PushRows(clock, base_version, std::move(grads)));
  for (const client::SparsePull& p : next) {
    PS_RETURN_IF_ERROR(ReadRows(p.table, p.keys, p.rows));
  }
  if (!next.empty()) ++pushes_with_rows_;
  return absl::OkStatus();
}

ParameterAccess::PendingStepEnd LocalParameterAccess::StartRowsStepEnd(
    int64_t clock, int64_t base_version,
    std::vector<absl::Span<const float>> grads,
    std::vector<client::SparsePush> rows, std::vector<client::SparsePull> next,
    std::vector<absl::Span<float>> tensors) {
  absl::StatusOr<StepEnd> end = [&]() -> absl::StatusOr<StepEnd> {
    for (size_t i = 0; i < grads.size(); ++i) {
      PS_RETURN_IF_ERROR(
          Push(clock, base_version, static_cast<int>(i), grads[i]));
    }
    PS_RETURN_IF_ERROR(
        PushRowsAndPull(clock, base_version, std::move(rows), std::move(next)));
    return FinishAndPull(clock, std::move(tensors));
  }();
  return [end = std::move(end)] { return end; };
}

}  // namespace ps::worker
