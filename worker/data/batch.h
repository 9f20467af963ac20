// The batch every data reader produces and every model layer consumes: dense
// features, sparse multi-hot fields and labels for `size` examples, in host
// memory, in the layouts the kernels take (row-major dense, CSR bags).
//
// What each format puts where (and what a missing value becomes):
//   IDX images   dense = pixels ([rows * cols], as worker/data/dataset.h scales
//                them); classes = the label. Nothing can be missing.
//   Criteo TSV   dense = the 13 integer features as log(1 + max(x, 0)); a
//                missing integer is 0.0 (the same as a value of 0). 26 sparse
//                fields C1..C26, one id each: the hex id hashed with the
//                field's salt; a missing id is the field's own "missing" key
//                (criteo_format.h; or an empty bag, an option). labels =
//                click 0.0 / 1.0.
//   libsvm       one weighted sparse field "features" (key = the feature
//                index, weight = its value); features not on the line are
//                absent from the bag. With a dense_dim, a dense vector
//                instead, absent features 0.0 (libsvm_format.h). labels =
//                0.0 / 1.0 (from 0/1 or -1/+1), or a real target, or classes.
//   MovieLens    sparse fields "user" and "item", one id each (the ids as
//                written); labels = the rating. Nothing can be missing.
#ifndef PS_WORKER_DATA_BATCH_H_
#define PS_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ps::worker::data {

// Which label vector of a Batch is filled.
enum class LabelKind {
  kNone,   // unlabelled data (Criteo's test.txt); neither vector is filled
  kFloat,  // Batch::labels: click 0/1, a rating, a regression target
  kClass,  // Batch::classes: a class id in [0, num_classes)
};

const char* LabelKindName(LabelKind kind);

// One sparse field of a batch: a bag of uint64 keys per example, in CSR form.
// Example b's ids are keys[offsets[b] .. offsets[b + 1]), with weights
// weights[offsets[b] .. offsets[b + 1]) when the field is weighted. A bag may
// be empty, and may repeat a key.
struct SparseField {
  std::string name;
  std::vector<uint64_t> keys;
  // [size + 1], non-decreasing, offsets[0] == 0, offsets[size] ==
  // keys.size(). int32 as the kernels' embedding bags take them: a field holds
  // at most kMaxFieldIds ids per batch.
  std::vector<int32_t> offsets;
  // Empty: every id weighs 1. Otherwise keys.size() fp32 weights (libsvm's
  // feature values).
  std::vector<float> weights;

  int64_t bag_size(int64_t b) const { return offsets[b + 1] - offsets[b]; }
};

inline constexpr int64_t kMaxFieldIds = std::numeric_limits<int32_t>::max();

// `size` examples. Plain data; movable, copyable.
struct Batch {
  int size = 0;
  int dense_dim = 0;
  std::vector<float> dense;         // [size, dense_dim] fp32, row-major
  std::vector<SparseField> sparse;  // in the schema's order
  LabelKind label_kind = LabelKind::kNone;
  std::vector<float> labels;     // [size] when label_kind == kFloat
  std::vector<int32_t> classes;  // [size] when label_kind == kClass
  // Where example 0 stands in the reader's shard stream (0-based): a reader
  // opened with ShardSpec::start_example = first_example + size continues
  // right after this batch.
  int64_t first_example = 0;

  absl::Span<const float> dense_row(int64_t b) const {
    return absl::MakeConstSpan(dense).subspan(b * dense_dim, dense_dim);
  }
};

// What a reader's batches hold: the part of a Batch that is the same for
// every batch of a data set.
struct BatchSchema {
  struct Field {
    std::string name;
    bool weighted = false;
  };
  int dense_dim = 0;
  std::vector<Field> sparse;
  LabelKind label_kind = LabelKind::kNone;
  int num_classes = 0;  // for kClass: classes lie in [0, num_classes)
};

// Checks every invariant documented above against `schema` (shapes, offsets,
// weights, label vectors, class range). INVALID_ARGUMENT naming the first
// broken one. For tests, fuzzers, and layers that take batches from outside.
absl::Status ValidateBatch(const Batch& batch, const BatchSchema& schema);

// Builds a Batch one example at a time, so that a parser can write a line's
// values as it reads them and drop the example when the line turns out bad:
//   builder.BeginExample();
//   builder.dense()[i] = ...; builder.AddId(f, key); builder.SetLabel(y);
//   then builder.EndExample() to keep it, or builder.AbortExample().
// Not thread-safe.
class BatchBuilder {
 public:
  explicit BatchBuilder(BatchSchema schema);

  const BatchSchema& schema() const { return schema_; }
  int size() const { return batch_.size; }

  // Starts an empty batch whose example 0 is shard example `first_example`.
  // Keeps the vectors' capacity.
  void Reset(int64_t first_example);

  // Opens a new example: its dense row is zero-filled, its bags empty, its
  // label 0.
  void BeginExample();
  // The open example's dense row (schema().dense_dim floats).
  absl::Span<float> dense() {
    return absl::MakeSpan(batch_.dense)
        .subspan(static_cast<size_t>(batch_.size) * batch_.dense_dim,
                 batch_.dense_dim);
  }
  // Adds an id to the open example's bag of field `field` (weight 1 on a
  // weighted field).
  void AddId(int field, uint64_t key) {
    SparseField& f = batch_.sparse[field];
    f.keys.push_back(key);
    if (schema_.sparse[field].weighted) f.weights.push_back(1.0f);
  }
  // On a weighted field only.
  void AddWeightedId(int field, uint64_t key, float weight) {
    SparseField& f = batch_.sparse[field];
    f.keys.push_back(key);
    f.weights.push_back(weight);
  }
  void SetLabel(float label) { label_ = label; }
  void SetClass(int32_t label) { class_ = label; }

  // Closes the open example. RESOURCE_EXHAUSTED (and the example is dropped)
  // if a field would hold more than kMaxFieldIds ids: use smaller batches.
  absl::Status EndExample();
  // Drops the open example.
  void AbortExample();

  // The batch so far; the builder is left empty (Reset it before reuse).
  Batch Take();

 private:
  BatchSchema schema_;
  Batch batch_;
  float label_ = 0.0f;
  int32_t class_ = 0;
};

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_BATCH_H_
