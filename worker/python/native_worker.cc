// ps._native.Worker and Assignment: registration with the coordinator,
// heartbeats, the assignment a worker trains, metric and failure reports.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/spec/data_plan.h"
#include "common/spec/model.h"
#include "google/protobuf/text_format.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "worker/coordinator_link.h"
#include "worker/loop/plan_batches.h"
#include "worker/python/native.h"

namespace py = pybind11;

namespace ps::python {
namespace {

absl::Duration Seconds(double s) { return absl::Milliseconds(s * 1000.0); }

std::string CommandName(WorkerAssignment::Command c) {
  switch (c) {
    case WorkerAssignment::IDLE:
      return "IDLE";
    case WorkerAssignment::TRAIN:
      return "TRAIN";
    case WorkerAssignment::STOP:
      return "STOP";
    default:
      return "NONE";
  }
}

// What the coordinator told this worker to do; immutable.
class Assignment {
 public:
  Assignment() = default;
  explicit Assignment(WorkerAssignment a) : a_(std::move(a)) {}
  const WorkerAssignment& proto() const { return a_; }

  std::string SpecText() const {
    std::string text;
    google::protobuf::TextFormat::PrintToString(a_.spec(), &text);
    return text;
  }
  // (name, shape) of the model's dense tensors, in model order.
  std::vector<std::pair<std::string, std::vector<int64_t>>> Tensors() const {
    absl::StatusOr<std::vector<TensorSpec>> tensors =
        ExpandModel(a_.spec().model());
    std::vector<std::pair<std::string, std::vector<int64_t>>> out;
    if (!tensors.ok()) return out;  // a model of tables only
    for (const TensorSpec& t : *tensors) {
      out.emplace_back(
          t.name(), std::vector<int64_t>(t.shape().begin(), t.shape().end()));
    }
    return out;
  }
  std::vector<std::pair<std::string, int>> Tables() const {
    std::vector<std::pair<std::string, int>> out;
    for (const SparseTableSpec& t : a_.spec().model().sparse_tables()) {
      out.emplace_back(t.name(), t.dim());
    }
    return out;
  }
  std::string Consistency() const {
    return ConsistencySpec::Model_Name(a_.spec().consistency().model());
  }
  // The clock after the plan's last batch, for `shard_steps` per data
  // shard.
  int64_t PlanEnd(int64_t shard_steps) const {
    const worker::WorkerPlan plan = worker::PlanOf(a_);
    return ps::PlanEnd(plan.start, plan.segments, shard_steps);
  }
  // (data shard, batch of the shard from 0 across epochs, epoch, batch in
  // the epoch) of `clock`.
  std::tuple<int, int64_t, int64_t, int64_t> BatchAt(
      int64_t clock, int64_t shard_steps, int64_t steps_per_epoch) const {
    absl::StatusOr<worker::PlannedBatch> b = worker::PlanBatchAt(
        worker::PlanOf(a_), clock, shard_steps, steps_per_epoch);
    Check(b.status());
    return {b->data_shard, b->batch, b->epoch, b->index};
  }

 private:
  WorkerAssignment a_;
};

class Worker {
 public:
  Worker(const std::string& address, const std::string& file,
         const std::string& token, double heartbeat_s, double start_timeout_s,
         const std::string& tls_cert, const std::string& tls_key,
         const std::string& tls_ca, int64_t member_id,
         const std::string& device) {
    worker::CoordinatorLinkOptions o;
    o.address = address;
    o.file = file;
    o.token = token;
    o.device = device;
    o.member_id = member_id;
    o.heartbeat_interval = Seconds(heartbeat_s);
    o.tls.cert_file = tls_cert;
    o.tls.key_file = tls_key;
    o.tls.ca_file = tls_ca;
    absl::StatusOr<std::unique_ptr<worker::CoordinatorLink>> link =
        worker::CreateCoordinatorLink(o);
    Check(link.status());
    link_ = *std::move(link);
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = link_->Start(absl::Now() + Seconds(start_timeout_s));
    }
    Check(s);
  }
  ~Worker() { Stop(); }

  int64_t member_id() const { return link_->member_id(); }
  bool connected() const { return link_->Connected(); }

  Assignment WaitForChange(const Assignment& known, double timeout_s) {
    py::gil_scoped_release release;
    return Assignment(link_->WaitForChange(known.proto(), Seconds(timeout_s)));
  }
  void SetProgress(const std::string& job_id, int64_t clock,
                   int64_t incarnation) {
    link_->SetProgress(job_id, clock, incarnation);
  }
  void SetDataShape(int64_t shard_steps, int64_t steps_per_epoch) {
    link_->SetDataShape(shard_steps, steps_per_epoch);
  }
  // `points`: (name, value, step, epoch, time_ms, final_model) tuples.
  void Report(const std::string& job_id, int64_t incarnation,
              const std::vector<std::tuple<std::string, double, int64_t, double,
                                           int64_t, bool>>& points,
              bool done) {
    std::vector<MetricPoint> out;
    out.reserve(points.size());
    for (const auto& [name, value, step, epoch, time_ms, final_model] :
         points) {
      MetricPoint& p = out.emplace_back();
      p.set_name(name);
      p.set_value(value);
      p.set_step(step);
      p.set_epoch(epoch);
      p.set_time_ms(time_ms);
      p.set_member_id(link_->member_id());
      p.set_incarnation(incarnation);
      p.set_final_model(final_model);
    }
    link_->ReportMetrics(job_id, std::move(out), done);
  }
  bool Flush(double timeout_s) {
    py::gil_scoped_release release;
    return link_->Flush(Seconds(timeout_s));
  }
  void ReportFailure(const std::string& job_id, const std::string& message) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = link_->ReportFailure(job_id, message, /*crashed=*/false);
    }
    Check(s);
  }
  void Stop() {
    if (link_ == nullptr) return;
    py::gil_scoped_release release;
    link_->Stop();
  }

 private:
  std::unique_ptr<worker::CoordinatorLink> link_;
};

}  // namespace

const WorkerAssignment& AssignmentProto(const py::handle& assignment) {
  return assignment.cast<const Assignment&>().proto();
}

void BindWorker(py::module_& m) {
  py::class_<Assignment>(m, "Assignment",
                         "What the coordinator told this worker to do.")
      .def(py::init<>())
      .def_property_readonly(
          "command",
          [](const Assignment& a) { return CommandName(a.proto().command()); })
      .def_property_readonly(
          "job_id", [](const Assignment& a) { return a.proto().job_id(); })
      .def_property_readonly(
          "rank", [](const Assignment& a) { return a.proto().rank(); })
      .def_property_readonly(
          "num_workers",
          [](const Assignment& a) { return a.proto().num_workers(); })
      .def_property_readonly(
          "num_data_shards",
          [](const Assignment& a) { return a.proto().num_data_shards(); })
      .def_property_readonly(
          "start_step",
          [](const Assignment& a) { return a.proto().start_step(); })
      .def_property_readonly(
          "incarnation",
          [](const Assignment& a) { return a.proto().incarnation(); })
      .def_property_readonly(
          "membership_epoch",
          [](const Assignment& a) { return a.proto().membership_epoch(); })
      .def_property_readonly(
          "evaluator",
          [](const Assignment& a) { return a.proto().evaluator(); })
      .def_property_readonly(
          "done", [](const Assignment& a) { return a.proto().done(); })
      .def_property_readonly(
          "others_done",
          [](const Assignment& a) { return a.proto().others_done(); })
      .def_property_readonly(
          "shard_steps",
          [](const Assignment& a) { return a.proto().shard_steps(); })
      .def_property_readonly(
          "steps_per_epoch",
          [](const Assignment& a) { return a.proto().steps_per_epoch(); })
      .def_property_readonly("server_addresses",
                             [](const Assignment& a) {
                               const auto& s = a.proto().server_addresses();
                               return std::vector<std::string>(s.begin(),
                                                               s.end());
                             })
      .def_property_readonly("spec_text", &Assignment::SpecText,
                             "The job spec (normalised) as text format.")
      .def_property_readonly(
          "tensors", &Assignment::Tensors,
          "(name, shape) of the model's dense tensors, in model order.")
      .def_property_readonly("tables", &Assignment::Tables,
                             "(name, dim) of the sparse tables, by index.")
      .def_property_readonly("consistency", &Assignment::Consistency)
      .def_property_readonly(
          "staleness",
          [](const Assignment& a) {
            return a.proto().spec().consistency().staleness();
          })
      .def_property_readonly("batch_size",
                             [](const Assignment& a) {
                               return a.proto().spec().data().batch_size();
                             })
      .def_property_readonly("max_steps",
                             [](const Assignment& a) {
                               return a.proto().spec().data().max_steps();
                             })
      .def_property_readonly(
          "epochs",
          [](const Assignment& a) { return a.proto().spec().data().epochs(); })
      .def_property_readonly(
          "eval_every_steps",
          [](const Assignment& a) {
            return a.proto().spec().data().eval_every_steps();
          })
      .def_property_readonly("eval_examples",
                             [](const Assignment& a) {
                               return a.proto().spec().data().eval_examples();
                             })
      .def_property_readonly(
          "seed", [](const Assignment& a) { return a.proto().spec().seed(); })
      .def_property_readonly(
          "allow_nonfinite_gradients",
          [](const Assignment& a) {
            return a.proto().spec().allow_nonfinite_gradients();
          })
      .def("plan_end", &Assignment::PlanEnd, py::arg("shard_steps"))
      .def("batch_at", &Assignment::BatchAt, py::arg("clock"),
           py::arg("shard_steps"), py::arg("steps_per_epoch"))
      .def("__repr__", [](const Assignment& a) {
        return absl::StrCat("Assignment(", CommandName(a.proto().command()),
                            " job=", a.proto().job_id(),
                            " rank=", a.proto().rank(), "/",
                            a.proto().num_workers(), ")");
      });

  py::class_<Worker>(m, "Worker",
                     "Registration with the coordinator and heartbeats.")
      .def(py::init<const std::string&, const std::string&, const std::string&,
                    double, double, const std::string&, const std::string&,
                    const std::string&, int64_t, const std::string&>(),
           py::arg("address") = "", py::arg("file") = "", py::arg("token") = "",
           py::arg("heartbeat_s") = 0.5, py::arg("start_timeout_s") = 300.0,
           py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("tls_ca") = "", py::arg("member_id") = 0,
           py::arg("device") = "python",
           "member_id > 0: speak as that member, which the ps_worker that "
           "started this process registered (no registration here).")
      .def_property_readonly("member_id", &Worker::member_id)
      .def_property_readonly("connected", &Worker::connected)
      .def("wait_for_change", &Worker::WaitForChange, py::arg("known"),
           py::arg("timeout_s"))
      .def("set_progress", &Worker::SetProgress, py::arg("job_id"),
           py::arg("clock"), py::arg("incarnation"))
      .def("set_data_shape", &Worker::SetDataShape, py::arg("shard_steps"),
           py::arg("steps_per_epoch"))
      .def("report", &Worker::Report, py::arg("job_id"), py::arg("incarnation"),
           py::arg("points"), py::arg("done"))
      .def("flush", &Worker::Flush, py::arg("timeout_s"))
      .def("report_failure", &Worker::ReportFailure, py::arg("job_id"),
           py::arg("message"))
      .def("stop", &Worker::Stop);
}

}  // namespace ps::python
