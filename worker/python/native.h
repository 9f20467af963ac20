// The Python package's native module (ps._native): the worker's link to
// the coordinator and the parameter interface (worker/client/
// parameter_access.h) as Python classes. It does not link libtorch or
// numpy's C API: arrays cross through the buffer protocol, zero-copy (a
// torch CPU tensor's .numpy() is a view of its memory).
#ifndef PS_WORKER_PYTHON_NATIVE_H_
#define PS_WORKER_PYTHON_NATIVE_H_

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "proto/coordinator_service.pb.h"
#include "pybind11/pybind11.h"

namespace ps::python {

// An error status crossing into Python: raised there as ps.InvalidArgument
// (a ValueError) for INVALID_ARGUMENT, OUT_OF_RANGE and FAILED_PRECONDITION,
// ps.Cancelled for CANCELLED, ps.Unavailable for UNAVAILABLE and
// DEADLINE_EXCEEDED, else ps.Error; the message is the status's (the
// server's reason).
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const absl::Status& status)
      : std::runtime_error(std::string(status.message())),
        code_(status.code()) {}
  absl::StatusCode code() const { return code_; }

 private:
  absl::StatusCode code_;
};

// Throws StatusError for a status that is not OK.
inline void Check(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// The WorkerAssignment inside a ps._native.Assignment.
const WorkerAssignment& AssignmentProto(const pybind11::handle& assignment);

// Registers the exceptions and their translator.
void BindErrors(pybind11::module_& m);
// Worker (registration, heartbeats, metrics) and Assignment.
void BindWorker(pybind11::module_& m);
// Access (Pull, Push, EndStep over the shards) and Call.
void BindAccess(pybind11::module_& m);
// Data: the job's training and test data through the worker's readers.
void BindData(pybind11::module_& m);
// read_checkpoint: a job's checkpoint files as numpy arrays.
void BindCheckpoint(pybind11::module_& m);

}  // namespace ps::python

#endif  // PS_WORKER_PYTHON_NATIVE_H_
