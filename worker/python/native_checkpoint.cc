// ps._native.read_checkpoint: a job's checkpoint files (one per shard of
// one version, common/wire/checkpoint.h) as numpy arrays, for evaluation
// or serving outside the cluster.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/platform/file_system.h"
#include "common/spec/model.h"
#include "common/wire/checkpoint.h"
#include "google/protobuf/text_format.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "worker/python/native.h"

namespace py = pybind11;

namespace ps::python {
namespace {

// Reads `paths` (the files of one checkpoint: every shard's at one
// version) into {job_id, version, spec_text, tensors: {name: array of the
// tensor's shape}, tables: {name: (keys uint64, rows [n, dim] float32)}}.
py::dict ReadCheckpoint(const std::vector<std::string>& paths) {
  if (paths.empty()) Check(absl::InvalidArgumentError("no checkpoint files"));
  std::vector<CheckpointData> files;
  {
    py::gil_scoped_release release;
    for (const std::string& p : paths) {
      absl::StatusOr<CheckpointData> d =
          ps::ReadCheckpoint(FileSystem::Posix(), p);
      if (!d.ok()) {
        py::gil_scoped_acquire acquire;
        Check(d.status());
      }
      files.push_back(*std::move(d));
    }
  }
  const CheckpointData& first = files.front();
  for (const CheckpointData& f : files) {
    if (f.job_id != first.job_id || f.num_shards != first.num_shards) {
      Check(absl::InvalidArgumentError(
          absl::StrCat("the files are not of one checkpoint: job ", f.job_id,
                       " on ", f.num_shards, " shards against job ",
                       first.job_id, " on ", first.num_shards)));
    }
  }
  if (static_cast<int>(files.size()) != first.num_shards) {
    Check(absl::InvalidArgumentError(
        absl::StrCat(files.size(), " files given; the checkpoint has ",
                     first.num_shards, " shards, one file each")));
  }
  py::dict tensors;
  std::map<std::string, std::pair<float*, int64_t>> dest;
  absl::StatusOr<std::vector<TensorSpec>> specs =
      ExpandModel(first.spec.model());
  if (specs.ok()) {
    for (const TensorSpec& t : *specs) {
      std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
      py::array_t<float> a(shape);
      std::fill(a.mutable_data(), a.mutable_data() + a.size(), 0.0f);
      dest[t.name()] = {a.mutable_data(), a.size()};
      tensors[py::str(t.name())] = a;
    }
  }
  int64_t version = first.version;
  std::map<std::string, std::pair<std::vector<uint64_t>, std::vector<float>>>
      rows;
  std::map<std::string, int> dims;
  for (const SparseTableSpec& t : first.spec.model().sparse_tables()) {
    dims[t.name()] = t.dim();
  }
  for (const CheckpointData& f : files) {
    version = std::min(version, f.version);
    for (const CheckpointRange& r : f.ranges) {
      auto it = dest.find(r.tensor_name);
      if (it == dest.end() || r.offset < 0 ||
          r.offset + static_cast<int64_t>(r.weights.size()) >
              it->second.second) {
        Check(absl::DataLossError(
            absl::StrCat("checkpoint range of '", r.tensor_name, "' at ",
                         r.offset, " does not fit the job's tensors")));
      }
      std::copy(r.weights.begin(), r.weights.end(),
                it->second.first + r.offset);
    }
    for (const CheckpointSparseTable& t : f.sparse_tables) {
      const int dim = dims.count(t.name) ? dims[t.name] : t.row_floats;
      auto& [keys, values] = rows[t.name];
      for (size_t i = 0; i < t.keys.size(); ++i) {
        keys.push_back(t.keys[i]);
        const float* row = t.values.data() + i * t.row_floats;
        values.insert(values.end(), row, row + dim);
      }
    }
  }
  py::dict tables;
  for (auto& [name, kv] : rows) {
    const py::ssize_t n = static_cast<py::ssize_t>(kv.first.size());
    const py::ssize_t dim = dims.count(name) ? dims[name] : 0;
    py::array_t<uint64_t> keys(n);
    std::copy(kv.first.begin(), kv.first.end(), keys.mutable_data());
    py::array_t<float> values({n, dim});
    std::copy(kv.second.begin(), kv.second.end(), values.mutable_data());
    tables[py::str(name)] = py::make_tuple(keys, values);
  }
  std::string spec_text;
  google::protobuf::TextFormat::PrintToString(first.spec, &spec_text);
  py::dict out;
  out["job_id"] = first.job_id;
  out["version"] = version;
  out["spec_text"] = spec_text;
  out["tensors"] = tensors;
  out["tables"] = tables;
  return out;
}

}  // namespace

void BindCheckpoint(py::module_& m) {
  m.def("read_checkpoint", &ReadCheckpoint, py::arg("paths"),
        "The files of one checkpoint (one per shard) as numpy arrays.");
}

}  // namespace ps::python
