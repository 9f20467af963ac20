// PYBIND11_MODULE(_native): the errors, Worker and Access.
#include <Python.h>

#include "pybind11/pybind11.h"
#include "worker/python/native.h"

namespace py = pybind11;

namespace ps::python {
namespace {

// Created once at import; the module holds them.
PyObject* g_error = nullptr;
PyObject* g_invalid = nullptr;
PyObject* g_cancelled = nullptr;
PyObject* g_unavailable = nullptr;

PyObject* NewError(py::module_& m, const char* name, PyObject* bases,
                   const char* doc) {
  PyObject* e = PyErr_NewExceptionWithDoc(
      (std::string("ps._native.") + name).c_str(), doc, bases, nullptr);
  if (e == nullptr) throw py::error_already_set();
  m.attr(name) = py::reinterpret_borrow<py::object>(e);
  return e;
}

}  // namespace

void BindErrors(py::module_& m) {
  g_error = NewError(m, "Error", PyExc_RuntimeError,
                     "An error of the parameter servers, the coordinator or "
                     "the client, with its reason.");
  py::tuple invalid_bases =
      py::make_tuple(py::reinterpret_borrow<py::object>(g_error),
                     py::reinterpret_borrow<py::object>(PyExc_ValueError));
  g_invalid = NewError(m, "InvalidArgument", invalid_bases.ptr(),
                       "Input the job does not accept (shape, dtype, table, "
                       "key count, non-finite gradient); nothing changed.");
  g_cancelled = NewError(m, "Cancelled", g_error, "The call was stopped.");
  g_unavailable =
      NewError(m, "Unavailable", g_error,
               "A shard or the coordinator did not answer within the retry "
               "deadline.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* type = g_error;
      switch (e.code()) {
        case absl::StatusCode::kInvalidArgument:
        case absl::StatusCode::kOutOfRange:
        case absl::StatusCode::kFailedPrecondition:
          type = g_invalid;
          break;
        case absl::StatusCode::kCancelled:
          type = g_cancelled;
          break;
        case absl::StatusCode::kUnavailable:
        case absl::StatusCode::kDeadlineExceeded:
          type = g_unavailable;
          break;
        default:
          break;
      }
      PyErr_SetString(type, e.what());
    }
  });
}

}  // namespace ps::python

PYBIND11_MODULE(_native, m) {
  m.doc() =
      "The parameter server's C++ worker client (ps package internals; use "
      "the ps module).";
  ps::python::BindErrors(m);
  ps::python::BindWorker(m);
  ps::python::BindAccess(m);
  ps::python::BindData(m);
  ps::python::BindCheckpoint(m);
}
