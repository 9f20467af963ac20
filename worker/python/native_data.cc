// ps._native.Data: the job's training data read with the worker's own
// readers, batch by batch at the addresses a data plan names, and its test
// data in order: the text formats (Criteo, libsvm, MovieLens) streamed, IDX
// images (Fashion-MNIST) loaded once and cut as ps_worker's prefetcher
// cuts them. Batches cross as numpy arrays that own their vectors (no
// copy).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "worker/data/batch.h"
#include "worker/data/batch_reader.h"
#include "worker/data/dataset.h"
#include "worker/data/shard_batches.h"
#include "worker/data/sharding.h"
#include "worker/data/spec_readers.h"
#include "worker/python/native.h"

namespace py = pybind11;

namespace ps::python {
namespace {

namespace data = ::ps::worker::data;

// A numpy array that owns `v` (moved to the heap, freed with the array).
template <typename T>
py::array Own(std::vector<T> v, std::vector<py::ssize_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  py::capsule owner(heap,
                    [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, heap->data(), owner);
}

py::dict ToPython(data::Batch b) {
  py::dict out;
  out["size"] = b.size;
  out["first_example"] = b.first_example;
  out["dense"] = Own(std::move(b.dense), {b.size, b.dense_dim});
  if (b.label_kind == data::LabelKind::kFloat) {
    out["labels"] = Own(std::move(b.labels), {b.size});
  } else if (b.label_kind == data::LabelKind::kClass) {
    out["labels"] = Own(std::move(b.classes), {b.size});
  } else {
    out["labels"] = py::none();
  }
  py::dict sparse;
  for (data::SparseField& f : b.sparse) {
    const py::ssize_t n = static_cast<py::ssize_t>(f.keys.size());
    std::vector<int64_t> offsets(f.offsets.begin(), f.offsets.end());
    const py::ssize_t bags = static_cast<py::ssize_t>(offsets.size());
    py::object weights = py::none();
    if (!f.weights.empty()) weights = Own(std::move(f.weights), {n});
    sparse[py::str(f.name)] = py::make_tuple(
        Own(std::move(f.keys), {n}), Own(std::move(offsets), {bags}), weights);
  }
  out["sparse"] = sparse;
  return out;
}

class Data {
 public:
  Data(py::handle assignment, const std::string& data_root)
      : a_(AssignmentProto(assignment)) {
    const DataSpec& d = a_.spec().data();
    num_shards_ = std::max(1, a_.num_data_shards());
    if (d.format() == DataSpec::IDX) {
      LoadIdx(data_root.empty() ? d.path() : data_root);
      return;
    }
    train_files_.assign(d.train_files().begin(), d.train_files().end());
    test_files_.assign(d.test_files().begin(), d.test_files().end());
    const DataSpec spec = d;
    const std::vector<std::string> files = train_files_;
    batches_ = std::make_unique<data::ShardBatches>(
        [spec, files](const data::ShardSpec& s) {
          return data::OpenSpecReader(spec, files, spec.shuffle_seed(), s);
        },
        num_shards_, d.batch_size());
  }

  // (steps per data shard, steps per epoch) as ps_worker derives them:
  // data.max_steps; the coordinator's (a worker counted); else counted in
  // one streaming pass (epochs x the smallest shard's full batches).
  std::pair<int64_t, int64_t> Shape() {
    const DataSpec& d = a_.spec().data();
    if (train_ != nullptr) {  // IDX: ps_worker's BudgetFor
      const int64_t per_epoch =
          train_->num_examples / num_shards_ / d.batch_size();
      if (per_epoch < 1) {
        Check(absl::FailedPreconditionError(absl::StrCat(
            "no full batch of ", d.batch_size(), " per data shard: ",
            train_->num_examples, " examples over ", num_shards_, " shards")));
      }
      return {d.max_steps() > 0 ? d.max_steps() : d.epochs() * per_epoch,
              per_epoch};
    }
    if (d.max_steps() > 0) return {d.max_steps(), d.max_steps()};
    if (a_.shard_steps() > 0 && a_.steps_per_epoch() > 0) {
      return {a_.shard_steps(), a_.steps_per_epoch()};
    }
    absl::StatusOr<std::vector<int64_t>> counts;
    data::ReaderStats stats;
    {
      py::gil_scoped_release release;
      counts = data::CountShardExamples(d, num_shards_, &stats);
    }
    Check(counts.status());
    const int64_t smallest = *std::min_element(counts->begin(), counts->end());
    const int64_t per_epoch = smallest / d.batch_size();
    if (per_epoch < 1) {
      Check(absl::FailedPreconditionError(absl::StrCat(
          "no full batch of ", d.batch_size(),
          " per data shard: the smallest "
          "of ",
          num_shards_, " data shards holds ", smallest, " examples")));
    }
    return {d.epochs() * per_epoch, per_epoch};
  }

  py::dict BatchAt(int shard, int64_t epoch, int64_t index) {
    if (train_ != nullptr) return IdxBatchAt(shard, epoch, index);
    absl::StatusOr<data::Batch> b;
    {
      py::gil_scoped_release release;
      b = batches_->BatchAt(shard, epoch, index);
    }
    Check(b.status());
    return ToPython(*std::move(b));
  }

  // The test files in order, up to `max_examples` (0: all), in batches of
  // `batch_size`.
  py::list TestBatches(int batch_size, int64_t max_examples) {
    if (test_ != nullptr) return IdxTestBatches(batch_size, max_examples);
    if (test_files_.empty()) {
      Check(absl::FailedPreconditionError("the job names no data.test_files"));
    }
    if (batch_size < 1) {
      Check(absl::InvalidArgumentError("batch_size must be >= 1"));
    }
    DataSpec in_order = a_.spec().data();
    in_order.set_shuffle_buffer(0);
    absl::StatusOr<std::unique_ptr<data::BatchReader>> reader =
        data::OpenSpecReader(in_order, test_files_, 0, {});
    Check(reader.status());
    py::list out;
    int64_t read = 0;
    while (max_examples <= 0 || read < max_examples) {
      const int want = static_cast<int>(
          max_examples <= 0
              ? batch_size
              : std::min<int64_t>(batch_size, max_examples - read));
      absl::StatusOr<data::Batch> b;
      {
        py::gil_scoped_release release;
        b = (*reader)->Next(want);
      }
      Check(b.status());
      if (b->size == 0) break;
      read += b->size;
      out.append(ToPython(*std::move(b)));
    }
    return out;
  }

  int64_t bad_lines() const {
    return batches_ == nullptr ? 0 : batches_->bad_lines();
  }
  int num_shards() const { return num_shards_; }

 private:
  void LoadIdx(const std::string& dir) {
    worker::DatasetOptions o;
    o.normalize = !a_.spec().data().no_normalize();
    absl::StatusOr<std::unique_ptr<worker::Dataset>> train, test;
    {
      py::gil_scoped_release release;
      train = worker::LoadFashionMnist(dir, worker::Split::kTrain, o);
      if (train.ok()) {
        o.stats = (*train)->stats;
        test = worker::LoadFashionMnist(dir, worker::Split::kTest, o);
      }
    }
    Check(train.status());
    Check(test.status());
    train_ = *std::move(train);
    test_ = *std::move(test);
  }

  // `rows` of `set` as a batch: dense images, class labels.
  static py::dict Gather(const worker::Dataset& set,
                         absl::Span<const int64_t> rows) {
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t size = set.example_size();
    std::vector<float> dense(n * size);
    std::vector<int32_t> labels(n);
    for (int64_t i = 0; i < n; ++i) {
      absl::Span<const float> image = set.image(rows[i]);
      std::copy(image.begin(), image.end(), dense.begin() + i * size);
      labels[i] = set.labels[rows[i]];
    }
    py::dict out;
    out["size"] = n;
    out["first_example"] = 0;
    out["dense"] = Own(std::move(dense), {n, size});
    out["labels"] = Own(std::move(labels), {n});
    out["sparse"] = py::dict();
    return out;
  }

  // Batch `index` of data shard `shard` in `epoch`: positions [index *
  // batch_size, (index + 1) * batch_size) of the shard's slice of the
  // epoch's permutation (worker/data/sharding.h), as ps_worker trains it.
  py::dict IdxBatchAt(int shard, int64_t epoch, int64_t index) {
    const int batch = a_.spec().data().batch_size();
    if (cached_shard_ != shard || cached_epoch_ != epoch) {
      const int shards[] = {shard};
      absl::StatusOr<std::vector<int64_t>> rows = worker::ShardIndices(
          train_->num_examples, epoch, a_.spec().data().shuffle_seed(), shards,
          num_shards_);
      Check(rows.status());
      cached_rows_ = *std::move(rows);
      cached_shard_ = shard;
      cached_epoch_ = epoch;
    }
    const int64_t begin = index * batch;
    if (index < 0 ||
        begin + batch > static_cast<int64_t>(cached_rows_.size())) {
      Check(absl::OutOfRangeError(absl::StrCat(
          "batch ", index, " of data shard ", shard, " in epoch ", epoch,
          ": the shard holds ", cached_rows_.size(), " examples")));
    }
    return Gather(*train_,
                  absl::MakeConstSpan(cached_rows_).subspan(begin, batch));
  }

  py::list IdxTestBatches(int batch_size, int64_t max_examples) {
    if (batch_size < 1) {
      Check(absl::InvalidArgumentError("batch_size must be >= 1"));
    }
    int64_t n = test_->num_examples;
    if (max_examples > 0) n = std::min(n, max_examples);
    std::vector<int64_t> rows(n);
    for (int64_t i = 0; i < n; ++i) rows[i] = i;
    py::list out;
    for (int64_t b = 0; b < n; b += batch_size) {
      out.append(Gather(*test_, absl::MakeConstSpan(rows).subspan(
                                    b, std::min<int64_t>(batch_size, n - b))));
    }
    return out;
  }

  const WorkerAssignment a_;
  std::unique_ptr<worker::Dataset> train_, test_;  // IDX
  std::vector<int64_t> cached_rows_;
  int cached_shard_ = -1;
  int64_t cached_epoch_ = -1;
  int num_shards_ = 1;
  std::vector<std::string> train_files_, test_files_;
  std::unique_ptr<data::ShardBatches> batches_;
};

}  // namespace

void BindData(py::module_& m) {
  py::class_<Data>(m, "Data",
                   "The job's text-format data through the worker's readers.")
      .def(py::init<py::handle, const std::string&>(), py::arg("assignment"),
           py::arg("data_root") = "",
           "data_root: the IDX files' directory on this host instead of "
           "data.path (ps_worker's --data_root).")
      .def("shape", &Data::Shape,
           "(steps per data shard, steps per epoch), counting the data in "
           "one pass when neither data.max_steps nor the coordinator has "
           "them.")
      .def("batch_at", &Data::BatchAt, py::arg("shard"), py::arg("epoch"),
           py::arg("index"),
           "Batch `index` of data shard `shard` in `epoch`: a dict of "
           "numpy arrays (size, dense, labels, sparse: {field: (keys, "
           "offsets, weights or None)}).")
      .def("test_batches", &Data::TestBatches, py::arg("batch_size"),
           py::arg("max_examples") = 0)
      .def_property_readonly("bad_lines", &Data::bad_lines)
      .def_property_readonly("num_shards", &Data::num_shards);
}

}  // namespace ps::python
