// ps._native.Data: the job's training data read with the worker's own
// readers, batch by batch at the addresses a data plan names, and its test
// data in order: the text formats (Criteo, libsvm, MovieLens) streamed, IDX
// images (Fashion-MNIST) loaded once; opened as ps_worker opens them
// (worker/loop/training_data.h). Batches cross as numpy arrays that own their
// vectors (no copy).
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
#include "worker/loop/training_data.h"
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
      : a_(AssignmentProto(assignment)),
        num_shards_(std::max(1, a_.num_data_shards())) {
    const DataSpec& d = a_.spec().data();
    std::shared_ptr<const worker::Dataset> train, test;
    if (d.format() == DataSpec::IDX) {
      LoadIdx(data_root.empty() ? d.path() : data_root, train, test);
    }
    // As ps_worker opens it: the shape counted in one streaming pass over
    // text files unless data.max_steps or the coordinator has it.
    absl::StatusOr<worker::TrainingData> opened;
    {
      py::gil_scoped_release release;
      opened = worker::OpenTrainingData(a_, train, test, num_shards_);
    }
    Check(opened.status());
    data_ = *std::move(opened);
    batches_ = std::make_unique<data::ShardBatches>(
        data_.open_shard, num_shards_, d.batch_size());
  }

  // (steps per data shard, steps per epoch) as ps_worker derives them.
  std::pair<int64_t, int64_t> Shape() const {
    return {data_.shape.total_steps, data_.shape.steps_per_epoch};
  }

  py::dict BatchAt(int shard, int64_t epoch, int64_t index) {
    absl::StatusOr<data::Batch> b;
    {
      py::gil_scoped_release release;
      b = batches_->BatchAt(shard, epoch, index);
    }
    Check(b.status());
    return ToPython(*std::move(b));
  }

  // The test data in order, up to `max_examples` (0: all), in batches of
  // `batch_size`.
  py::list TestBatches(int batch_size, int64_t max_examples) {
    if (data_.open_test == nullptr) {
      Check(absl::FailedPreconditionError(
          "the job has no test data (data.test_files)"));
    }
    if (batch_size < 1) {
      Check(absl::InvalidArgumentError("batch_size must be >= 1"));
    }
    absl::StatusOr<std::unique_ptr<data::BatchReader>> reader =
        data_.open_test();
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

  int64_t bad_lines() const { return batches_->bad_lines(); }
  int num_shards() const { return num_shards_; }

 private:
  void LoadIdx(const std::string& dir,
               std::shared_ptr<const worker::Dataset>& train,
               std::shared_ptr<const worker::Dataset>& test) {
    worker::DatasetOptions o;
    o.normalize = !a_.spec().data().no_normalize();
    absl::StatusOr<std::unique_ptr<worker::Dataset>> tr, te;
    {
      py::gil_scoped_release release;
      tr = worker::LoadFashionMnist(dir, worker::Split::kTrain, o);
      if (tr.ok()) {
        o.stats = (*tr)->stats;
        te = worker::LoadFashionMnist(dir, worker::Split::kTest, o);
      }
    }
    Check(tr.status());
    Check(te.status());
    train = *std::move(tr);
    test = *std::move(te);
  }

  const WorkerAssignment a_;
  const int num_shards_;
  worker::TrainingData data_;
  std::unique_ptr<data::ShardBatches> batches_;
};

}  // namespace

void BindData(py::module_& m) {
  py::class_<Data>(
      m, "Data", "The job's data (IDX or a text format) as ps_worker reads it.")
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
