// ps._native.Access and Call: the parameter interface (Pull, Push,
// EndStep; worker/client/parameter_access.h) over the job's shards, with
// numpy arrays (or anything with the buffer protocol) as its buffers.
// Every array a call takes is held by it until the call is over (a push's
// until its step's end), so Python may drop its own references at once.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "worker/client/parameter_access.h"
#include "worker/client/ps_access.h"
#include "worker/python/native.h"

namespace py = pybind11;

namespace ps::python {

namespace {

using client::CallResult;
using client::Handle;

void Invalid(const std::string& message) {
  throw StatusError(absl::InvalidArgumentError(message));
}

bool CContiguous(const py::buffer_info& b) {
  py::ssize_t expected = b.itemsize;
  for (int i = b.ndim - 1; i >= 0; --i) {
    if (b.shape[i] != 1 && b.strides[i] != expected) return false;
    expected *= b.shape[i];
  }
  return true;
}

// A C-contiguous float32 buffer of `what`; writable for what a call fills.
py::buffer_info Floats(const py::handle& array, bool writable,
                       const std::string& what) {
  py::buffer_info b;
  try {
    b = py::reinterpret_borrow<py::buffer>(array).request(writable);
  } catch (const std::exception& e) {
    Invalid(absl::StrCat(what, ": not a ", writable ? "writable " : "",
                         "buffer (", e.what(), ")"));
  }
  if (b.format != py::format_descriptor<float>::format() || b.itemsize != 4) {
    Invalid(absl::StrCat(what, ": expected float32, got dtype format '",
                         b.format, "'"));
  }
  if (!CContiguous(b)) Invalid(absl::StrCat(what, ": not C-contiguous"));
  return b;
}

// Keys: 64-bit integers (uint64 or int64, the bits taken as uint64).
py::buffer_info Keys(const py::handle& array, const std::string& what) {
  py::buffer_info b;
  try {
    b = py::reinterpret_borrow<py::buffer>(array).request(false);
  } catch (const std::exception& e) {
    Invalid(absl::StrCat(what, ": not a buffer (", e.what(), ")"));
  }
  const std::string& f = b.format;
  const bool integer = f == "Q" || f == "L" || f == "q" || f == "l" ||
                       f == "<Q" || f == "<q" || f == "=Q" || f == "=q";
  if (!integer || b.itemsize != 8 || b.ndim != 1) {
    Invalid(absl::StrCat(what,
                         ": expected a 1-d array of uint64 or int64, "
                         "got format '",
                         f, "' with ", b.ndim, " dimensions"));
  }
  if (!CContiguous(b)) Invalid(absl::StrCat(what, ": not C-contiguous"));
  return b;
}

// ps._native.unique_keys: `keys`' distinct values in the order they first
// appear into `unique` and, for each key, its index there into `inverse`
// (both int64 arrays of len(keys)); returns the count. A hash map: O(n),
// against torch.unique's sort.
int64_t UniqueKeys(const py::handle& keys, const py::handle& unique,
                   const py::handle& inverse) {
  py::buffer_info k = Keys(keys, "keys");
  py::buffer_info u, v;
  try {
    u = py::reinterpret_borrow<py::buffer>(unique).request(true);
    v = py::reinterpret_borrow<py::buffer>(inverse).request(true);
  } catch (const std::exception& e) {
    Invalid(
        absl::StrCat("unique/inverse: not writable buffers (", e.what(), ")"));
  }
  for (const py::buffer_info* b : {&u, &v}) {
    if (b->itemsize != 8 || b->ndim != 1 || b->size < k.size ||
        !CContiguous(*b)) {
      Invalid(
          absl::StrCat("unique/inverse: expected 1-d int64 arrays of at "
                       "least ",
                       k.size, " elements"));
    }
  }
  const auto* in = static_cast<const uint64_t*>(k.ptr);
  auto* out = static_cast<uint64_t*>(u.ptr);
  auto* index = static_cast<int64_t*>(v.ptr);
  const int64_t n = k.size;
  int64_t count = 0;
  {
    py::gil_scoped_release release;
    absl::flat_hash_map<uint64_t, int64_t> seen;
    seen.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      auto [it, added] = seen.try_emplace(in[i], count);
      if (added) out[count++] = in[i];
      index[i] = it->second;
    }
  }
  return count;
}

// ps._native.scatter_add_rows: out[index[i]] += values[i] for each row i
// of `values` ([n, dim] float32; `index` n int64 in [0, len(out))): a
// sparse gradient (one row per occurrence of a key) summed per unique key,
// without the sort of torch's dense embedding_bag backward.
void ScatterAddRows(const py::handle& index, const py::handle& values,
                    const py::handle& out) {
  py::buffer_info i = Keys(index, "index");
  py::buffer_info v = Floats(values, false, "values");
  py::buffer_info o = Floats(out, true, "out");
  if (v.ndim != 2 || o.ndim != 2 || v.shape[0] != i.size ||
      v.shape[1] != o.shape[1]) {
    Invalid(absl::StrCat("scatter_add_rows: values [", i.size,
                         ", dim] and "
                         "out [rows, dim] expected"));
  }
  const auto* idx = static_cast<const int64_t*>(i.ptr);
  const auto* in = static_cast<const float*>(v.ptr);
  auto* sum = static_cast<float*>(o.ptr);
  const int64_t n = i.size, dim = v.shape[1], rows = o.shape[0];
  for (int64_t k = 0; k < n; ++k) {
    if (idx[k] < 0 || idx[k] >= rows) {
      Invalid(absl::StrCat("scatter_add_rows: index ", idx[k], " outside [0, ",
                           rows, ")"));
    }
  }
  py::gil_scoped_release release;
  for (int64_t k = 0; k < n; ++k) {
    float* row = sum + idx[k] * dim;
    const float* add = in + k * dim;
    for (int64_t d = 0; d < dim; ++d) row[d] += add[d];
  }
}

absl::Span<float> Span(py::buffer_info& b) {
  return absl::Span<float>(static_cast<float*>(b.ptr), b.size);
}

// One call on its way; Python holds it. Waits on destruction when nobody
// did, so the buffers it writes outlive its writes.
class Call {
 public:
  Call(Handle handle, std::vector<py::object> keep)
      : handle_(std::move(handle)), keep_(std::move(keep)) {}
  ~Call() {
    if (!handle_.waited()) {
      py::gil_scoped_release release;
      (void)handle_.Wait();
    }
  }
  // (version, staleness).
  std::pair<int64_t, int64_t> Wait() {
    absl::StatusOr<CallResult> r;
    {
      py::gil_scoped_release release;
      r = handle_.Wait();
    }
    keep_.clear();
    Check(r.status());
    return {r->version, r->staleness};
  }
  bool done() const { return handle_.waited(); }

 private:
  Handle handle_;
  std::vector<py::object> keep_;
};

using DenseList = std::vector<std::tuple<int, py::object, int64_t>>;
using RowList = std::vector<std::tuple<int, py::object, py::object>>;

class Access {
 public:
  Access(py::handle assignment, int64_t member_id, const std::string& token,
         double retry_s, double wait_spin_us, const std::string& tls_cert,
         const std::string& tls_key, const std::string& tls_ca)
      : assignment_(AssignmentProto(assignment)) {
    client::PsAccessOptions o;
    o.token = token;
    o.member_id = member_id;
    o.retry_deadline = absl::Milliseconds(retry_s * 1000.0);
    o.wait_spin = absl::Microseconds(wait_spin_us);
    o.stop = &stop_;
    o.tls.cert_file = tls_cert;
    o.tls.key_file = tls_key;
    o.tls.ca_file = tls_ca;
    absl::StatusOr<std::unique_ptr<client::PsAccess>> access;
    {
      py::gil_scoped_release release;
      access = client::CreatePsAccess(assignment_, o);
    }
    Check(access.status());
    access_ = *std::move(access);
    for (const SparseTableSpec& t : assignment_.spec().model().sparse_tables())
      dims_.push_back(t.dim());
  }
  ~Access() { Close(); }

  std::unique_ptr<Call> Pull(int64_t clock, const py::list& tensors,
                             const RowList& rows, bool current) {
    client::PullArgs args;
    args.clock = clock;
    args.current = current;
    std::vector<py::object> keep;
    for (size_t i = 0; i < tensors.size(); ++i) {
      py::buffer_info b = Floats(tensors[i], true, absl::StrCat("tensor ", i));
      args.tensors.push_back(Span(b));
      keep.push_back(py::reinterpret_borrow<py::object>(tensors[i]));
    }
    args.rows = Pulls(rows, keep);
    Handle h;
    {
      py::gil_scoped_release release;
      h = Live()->Pull(std::move(args));
    }
    return std::make_unique<Call>(std::move(h), std::move(keep));
  }

  void Push(int64_t clock, int64_t base_version, const DenseList& dense,
            const RowList& rows) {
    client::StepArgs args;
    args.clock = clock;
    args.base_version = base_version;
    Gradients(dense, rows, args, pushed_);
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = Live()->Push(std::move(args));
    }
    Check(s);
  }

  std::unique_ptr<Call> EndStep(int64_t clock, int64_t base_version,
                                const DenseList& dense, const RowList& rows,
                                const RowList& next_rows,
                                const py::list& next_weights) {
    client::StepArgs args;
    args.clock = clock;
    args.base_version = base_version;
    std::vector<py::object> keep = std::move(pushed_);
    pushed_.clear();
    Gradients(dense, rows, args, keep);
    args.next_rows = Pulls(next_rows, keep);
    for (size_t i = 0; i < next_weights.size(); ++i) {
      py::buffer_info b =
          Floats(next_weights[i], true, absl::StrCat("next weights ", i));
      args.next_weights.push_back(Span(b));
      keep.push_back(py::reinterpret_borrow<py::object>(next_weights[i]));
    }
    Handle h;
    {
      py::gil_scoped_release release;
      h = Live()->EndStep(std::move(args));
    }
    return std::make_unique<Call>(std::move(h), std::move(keep));
  }

  std::vector<int64_t> PartBoundaries(int index) const {
    return Live()->PartBoundaries(index);
  }

  // Makes every wait, now and later, end with CANCELLED (from any thread:
  // the job's watcher on a stop or a rollback).
  void Stop() { stop_ = true; }

  // Stops every wait (CANCELLED) and ends the calls in flight; the access
  // takes no call after it.
  void Close() {
    if (access_ == nullptr) return;
    stop_ = true;
    {
      py::gil_scoped_release release;
      access_->CancelCalls();
      absl::MutexLock l(&life_mu_);
      access_.reset();
    }
    pushed_.clear();
  }

  // A failover of replicated shards (same job, same incarnation): the
  // shards' addresses from now on; calls in flight go on there (from any
  // thread: the job's watcher). Nothing once closed.
  void SetServerAddresses(const std::vector<std::string>& addresses) {
    py::gil_scoped_release release;
    absl::MutexLock l(&life_mu_);
    if (access_ == nullptr) return;
    absl::Status s = access_->SetServerAddresses(addresses);
    if (!s.ok()) {
      py::gil_scoped_acquire acquire;
      throw StatusError(s);
    }
  }

 private:
  client::ParameterAccess* Live() const {
    if (access_ == nullptr) {
      throw StatusError(absl::FailedPreconditionError("the access is closed"));
    }
    return access_.get();
  }

  int Table(int table, const std::string& what) const {
    if (table < 0 || table >= static_cast<int>(dims_.size())) {
      Invalid(absl::StrCat(what, ": no sparse table ", table, " (the job has ",
                           dims_.size(), ")"));
    }
    return dims_[table];
  }

  // Checks rows (keys x dim floats of `table`) against keys.
  void CheckRows(int table, const py::buffer_info& keys,
                 const py::buffer_info& rows, const std::string& what) const {
    const int64_t dim = Table(table, what);
    if (rows.size != keys.size * dim) {
      Invalid(absl::StrCat(what, ": ", keys.size, " keys of table ", table,
                           " (dim ", dim, ") need ", keys.size * dim,
                           " floats, got ", rows.size));
    }
  }

  std::vector<client::SparsePull> Pulls(const RowList& rows,
                                        std::vector<py::object>& keep) const {
    std::vector<client::SparsePull> out;
    for (const auto& [table, keys, values] : rows) {
      const std::string what = absl::StrCat("rows of table ", table);
      py::buffer_info k = Keys(keys, what + " (keys)");
      py::buffer_info v = Floats(values, true, what);
      CheckRows(table, k, v, what);
      client::SparsePull& p = out.emplace_back();
      p.table = table;
      p.keys = absl::Span<const uint64_t>(static_cast<const uint64_t*>(k.ptr),
                                          k.size);
      p.rows = Span(v);
      keep.push_back(keys);
      keep.push_back(values);
    }
    return out;
  }

  void Gradients(const DenseList& dense, const RowList& rows,
                 client::StepArgs& args, std::vector<py::object>& keep) const {
    for (const auto& [index, grad, offset] : dense) {
      py::buffer_info b =
          Floats(grad, false, absl::StrCat("gradient of tensor ", index));
      client::TensorGrad& g = args.dense.emplace_back();
      g.tensor_index = index;
      g.grad =
          absl::Span<const float>(static_cast<const float*>(b.ptr), b.size);
      g.offset = offset;
      keep.push_back(grad);
    }
    for (const auto& [table, keys, grads] : rows) {
      const std::string what = absl::StrCat("row gradients of table ", table);
      py::buffer_info k = Keys(keys, what + " (keys)");
      py::buffer_info v = Floats(grads, false, what);
      CheckRows(table, k, v, what);
      client::SparsePush& p = args.rows.emplace_back();
      p.table = table;
      p.keys = absl::Span<const uint64_t>(static_cast<const uint64_t*>(k.ptr),
                                          k.size);
      p.grads =
          absl::Span<const float>(static_cast<const float*>(v.ptr), v.size);
      keep.push_back(keys);
      keep.push_back(grads);
    }
  }

  const WorkerAssignment assignment_;
  std::vector<int> dims_;
  std::atomic<bool> stop_{false};
  // Reset by Close; SetServerAddresses (another thread) holds life_mu_.
  absl::Mutex life_mu_;
  std::unique_ptr<client::PsAccess> access_;
  // Arrays of this step's pushes, held until its EndStep is over.
  std::vector<py::object> pushed_;
};

}  // namespace

void BindAccess(py::module_& m) {
  py::class_<Call>(m, "Call", "A call on its way to the shards.")
      .def("wait", &Call::Wait,
           "Waits for the call: (version, staleness). Raises the call's "
           "error.")
      .def_property_readonly("done", &Call::done);

  py::class_<Access>(m, "Access",
                     "The job's parameters on its shards: Pull, Push, "
                     "EndStep (worker/client/parameter_access.h).")
      .def(py::init<py::handle, int64_t, const std::string&, double, double,
                    const std::string&, const std::string&,
                    const std::string&>(),
           py::arg("assignment"), py::arg("member_id"), py::arg("token") = "",
           py::arg("retry_s") = 60.0, py::arg("wait_spin_us") = 0.0,
           py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("tls_ca") = "")
      .def("pull", &Access::Pull, py::arg("clock"), py::arg("tensors"),
           py::arg("rows"), py::arg("current") = false,
           "Weights of `clock` into `tensors` (float32 arrays, model order; "
           "may be empty) and rows [(table, keys, out)]. Returns a Call.")
      .def("push", &Access::Push, py::arg("clock"), py::arg("base_version"),
           py::arg("dense"), py::arg("rows"),
           "Sends gradients of the open step: dense [(index, grad, offset)], "
           "rows [(table, unique keys, grads)].")
      .def("end_step", &Access::EndStep, py::arg("clock"),
           py::arg("base_version"), py::arg("dense"), py::arg("rows"),
           py::arg("next_rows"), py::arg("next_weights"),
           "Ends step `clock` with its last gradients; brings back the next "
           "step's weights and rows. Returns a Call.")
      .def("part_boundaries", &Access::PartBoundaries, py::arg("index"))
      .def("stop", &Access::Stop,
           "Ends every wait with ps.Cancelled (thread-safe).")
      .def("set_server_addresses", &Access::SetServerAddresses,
           py::arg("addresses"),
           "A failover: the shards' addresses from now on (thread-safe).")
      .def("close", &Access::Close);

  m.def("scatter_add_rows", &ScatterAddRows, py::arg("index"),
        py::arg("values"), py::arg("out"),
        "out[index[i]] += values[i] for each row i (float32 [n, dim] into "
        "[rows, dim]).");
  m.def("unique_keys", &UniqueKeys, py::arg("keys"), py::arg("unique"),
        py::arg("inverse"),
        "The distinct keys in order of first appearance into `unique` and "
        "each key's index there into `inverse` (int64 arrays at least as "
        "long as `keys`); returns how many are distinct.");
}

}  // namespace ps::python
