#include "server/shard/job_setup.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "common/spec/config.h"
#include "common/spec/model.h"
#include "server/shard/dense_table.h"
#include "server/shard/sparse_table.h"

namespace ps::server {

absl::StatusOr<JobSpec> CheckSetupRequest(const SetupJobRequest& request) {
  if (request.job_id().empty()) {
    return absl::InvalidArgumentError("SetupJob: job_id is empty");
  }
  for (char ch : request.job_id()) {
    if (!absl::ascii_isalnum(ch) && ch != '-' && ch != '_' && ch != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("SetupJob: job_id '", request.job_id(),
                       "' may only hold letters, digits, '-', '_' and '.'"));
    }
  }
  if (request.job_id()[0] == '.') {
    return absl::InvalidArgumentError(
        "SetupJob: job_id may not start with '.'");
  }
  if (request.num_shards() < 1 || request.shard_index() < 0 ||
      request.shard_index() >= request.num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetupJob: shard_index ", request.shard_index(),
        " is not in [0, num_shards = ", request.num_shards(), ")"));
  }
  ValidationOptions vopts;
  vopts.check_dataset_files = false;
  PS_RETURN_IF_ERROR(
      Annotate(ValidateJobSpec(request.spec(), vopts), "SetupJob: job spec"));
  return NormalizeJobSpec(request.spec());
}

absl::StatusOr<std::shared_ptr<Job>> NewJob(const SetupJobRequest& request,
                                            const JobSpec& spec) {
  auto job = std::make_shared<Job>();
  job->id = request.job_id();
  job->spec = spec;
  job->shard_index = request.shard_index();
  job->num_shards = request.num_shards();
  if (request.incarnation() < 0 ||
      request.incarnation() >= (int64_t{1} << (64 - kSeqIncarnationShift))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SetupJob: incarnation ", request.incarnation(), " is out of range"));
  }
  job->incarnation = request.incarnation();
  PS_ASSIGN_OR_RETURN(std::vector<TensorSpec> tensors,
                      ExpandModel(spec.model()));
  PS_ASSIGN_OR_RETURN(
      Placement placement,
      ComputePlacement(tensors, job->num_shards, spec.chunk_bytes()));
  job->placement = std::make_shared<const Placement>(std::move(placement));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<DenseTable> dense,
                      DenseTable::Create(job->id, spec, std::move(tensors),
                                         job->placement, job->shard_index));
  job->tables.push_back(std::move(dense));
  for (int t = 0; t < spec.model().sparse_tables_size(); ++t) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<SparseTable> sparse,
                        SparseTable::Create(job->id, spec, t, job->shard_index,
                                            job->num_shards));
    job->sparse_tables.push_back(sparse.get());
    job->tables.push_back(std::move(sparse));
  }
  absl::MutexLock jl(&job->mu);
  for (const auto& table : job->tables) {
    job->early_applied.emplace_back(table->num_parts(), -1);
  }
  return job;
}

void RegisterJobMetrics(MetricsRegistry& m, Job& job) {
  const MetricsRegistry::Labels labels = {
      {"job", job.id}, {"shard", absl::StrCat(job.shard_index)}};
  JobMetrics& metrics = job.metrics;
  metrics.pushes =
      &m.Counter("shard_pushes_total", "Pushes applied or staged", labels);
  metrics.pulls = &m.Counter("shard_pulls_total", "Pulls served", labels);
  metrics.bytes_in = &m.Counter("shard_bytes_in_total",
                                "Gradient payload bytes received", labels);
  metrics.bytes_out =
      &m.Counter("shard_bytes_out_total", "Weight payload bytes sent", labels);
  metrics.dropped =
      &m.Counter("shard_dropped_pushes_total",
                 "BSP pushes that arrived after their step closed", labels);
  metrics.rejected = &m.Counter(
      "shard_rejected_pushes_total",
      "Pushes rejected (bad input, too stale, not a member)", labels);
  metrics.duplicate =
      &m.Counter("shard_duplicate_pushes_total",
                 "Retried pushes acknowledged without applying", labels);
  metrics.version = &m.Gauge(
      "shard_version", "Version of the job's weights on this shard", labels);
  metrics.apply_seconds =
      &m.Histogram("shard_apply_seconds", "Time to apply one push or BSP step",
                   MetricsRegistry::LatencyBuckets(), labels);
  metrics.staleness =
      &m.Histogram("shard_push_staleness",
                   "Versions between a push's base and the shard's version",
                   {0, 1, 2, 4, 8, 16, 32, 64, 128}, labels);
  // Each sparse table's figures (SparseTableStatus), labelled by table.
  for (SparseTable* table : job.sparse_tables) {
    MetricsRegistry::Labels l = labels;
    l["table"] = table->spec().name();
    SparseTable::Gauges g;
    g.rows = &m.Gauge("sparse_table_rows", "Rows held", l);
    g.bytes = &m.Gauge("sparse_table_bytes",
                       "Memory of the rows, their optimizer slots, index and "
                       "admission sketch",
                       l);
    g.evictions = &m.Gauge("sparse_table_evictions",
                           "Rows evicted (LRU) or expired (TTL) so far", l);
    g.admissions =
        &m.Gauge("sparse_table_admissions",
                 "Keys given a row by the admission filter so far", l);
    g.dropped = &m.Gauge(
        "sparse_table_dropped_gradients",
        "Gradients dropped so far because their key was not admitted", l);
    g.rejected = &m.Gauge(
        "sparse_table_rejected_gradients",
        "Gradients of pushes refused whole so far (bad input, NaN/Inf, "
        "staleness)",
        l);
    table->SetGauges(m, g);
  }
}

}  // namespace ps::server
