#include "worker/data/batch.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps::worker::data {

const char* LabelKindName(LabelKind kind) {
  switch (kind) {
    case LabelKind::kNone:
      return "none";
    case LabelKind::kFloat:
      return "float";
    case LabelKind::kClass:
      return "class";
  }
  return "unknown";
}

absl::Status ValidateBatch(const Batch& batch, const BatchSchema& schema) {
  const int64_t n = batch.size;
  if (n < 0) return absl::InvalidArgumentError("negative batch size");
  if (batch.dense_dim != schema.dense_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dense_dim ", batch.dense_dim, ", schema says ", schema.dense_dim));
  }
  if (static_cast<int64_t>(batch.dense.size()) != n * batch.dense_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense holds ", batch.dense.size(), " floats, expected ",
                     n, " x ", batch.dense_dim));
  }
  if (batch.sparse.size() != schema.sparse.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(batch.sparse.size(), " sparse fields, schema has ",
                     schema.sparse.size()));
  }
  for (size_t f = 0; f < batch.sparse.size(); ++f) {
    const SparseField& field = batch.sparse[f];
    const std::string where =
        absl::StrCat("sparse field ", f, " (", schema.sparse[f].name, ")");
    if (field.name != schema.sparse[f].name) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is named ", field.name));
    }
    if (static_cast<int64_t>(field.offsets.size()) != n + 1 ||
        field.offsets[0] != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": offsets must be ", n + 1,
                       " values starting at 0, got ", field.offsets.size()));
    }
    for (int64_t b = 0; b < n; ++b) {
      if (field.offsets[b + 1] < field.offsets[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": offsets decrease at example ", b));
      }
    }
    if (static_cast<size_t>(field.offsets[n]) != field.keys.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": offsets end at ", field.offsets[n], " but ",
                       field.keys.size(), " keys"));
    }
    const size_t want_weights =
        schema.sparse[f].weighted ? field.keys.size() : 0;
    if (field.weights.size() != want_weights) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", field.weights.size(), " weights, expected ",
                       want_weights));
    }
  }
  if (batch.label_kind != schema.label_kind) {
    return absl::InvalidArgumentError(
        absl::StrCat("label kind ", LabelKindName(batch.label_kind),
                     ", schema says ", LabelKindName(schema.label_kind)));
  }
  const int64_t want_labels = batch.label_kind == LabelKind::kFloat ? n : 0;
  const int64_t want_classes = batch.label_kind == LabelKind::kClass ? n : 0;
  if (static_cast<int64_t>(batch.labels.size()) != want_labels ||
      static_cast<int64_t>(batch.classes.size()) != want_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat(batch.labels.size(), " float labels and ",
                     batch.classes.size(), " classes for ", n, " examples of ",
                     LabelKindName(batch.label_kind), " labels"));
  }
  for (int64_t b = 0; b < want_classes; ++b) {
    if (batch.classes[b] < 0 || batch.classes[b] >= schema.num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("class ", batch.classes[b], " of example ", b,
                       " is outside [0, ", schema.num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

BatchBuilder::BatchBuilder(BatchSchema schema) : schema_(std::move(schema)) {
  Reset(0);
}

void BatchBuilder::Reset(int64_t first_example) {
  batch_.size = 0;
  batch_.dense_dim = schema_.dense_dim;
  batch_.dense.clear();
  batch_.sparse.resize(schema_.sparse.size());
  for (size_t f = 0; f < schema_.sparse.size(); ++f) {
    SparseField& field = batch_.sparse[f];
    field.name = schema_.sparse[f].name;
    field.keys.clear();
    field.weights.clear();
    field.offsets.assign(1, 0);
  }
  batch_.label_kind = schema_.label_kind;
  batch_.labels.clear();
  batch_.classes.clear();
  batch_.first_example = first_example;
}

void BatchBuilder::BeginExample() {
  batch_.dense.resize(static_cast<size_t>(batch_.size + 1) * batch_.dense_dim,
                      0.0f);
  label_ = 0.0f;
  class_ = 0;
}

absl::Status BatchBuilder::EndExample() {
  for (SparseField& field : batch_.sparse) {
    if (static_cast<int64_t>(field.keys.size()) > kMaxFieldIds) {
      AbortExample();
      return absl::ResourceExhaustedError(
          absl::StrCat("sparse field ", field.name, " would hold more than ",
                       kMaxFieldIds, " ids in one batch; use smaller batches"));
    }
  }
  for (SparseField& field : batch_.sparse) {
    field.offsets.push_back(static_cast<int32_t>(field.keys.size()));
  }
  if (schema_.label_kind == LabelKind::kFloat) batch_.labels.push_back(label_);
  if (schema_.label_kind == LabelKind::kClass) batch_.classes.push_back(class_);
  ++batch_.size;
  return absl::OkStatus();
}

void BatchBuilder::AbortExample() {
  batch_.dense.resize(static_cast<size_t>(batch_.size) * batch_.dense_dim);
  for (SparseField& field : batch_.sparse) {
    const size_t kept = static_cast<size_t>(field.offsets.back());
    field.keys.resize(kept);
    if (!field.weights.empty()) field.weights.resize(kept);
  }
}

Batch BatchBuilder::Take() {
  Batch out = std::move(batch_);
  batch_ = Batch();
  return out;
}

}  // namespace ps::worker::data
