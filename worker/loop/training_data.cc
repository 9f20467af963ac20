#include "worker/loop/training_data.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/platform/status.h"
#include "worker/data/idx_batch_reader.h"
#include "worker/data/spec_readers.h"

namespace ps::worker {
namespace {

template <typename T>
absl::StatusOr<T> Annotated(absl::StatusOr<T> s, absl::string_view context) {
  if (!s.ok()) return Annotate(s.status(), context);
  return s;
}

absl::StatusOr<TrainingData> IdxData(const WorkerAssignment& a,
                                     std::shared_ptr<const Dataset> train,
                                     std::shared_ptr<const Dataset> test,
                                     int num_shards) {
  if (train == nullptr) {
    return absl::InvalidArgumentError("an IDX job without its training set");
  }
  const JobSpec& spec = a.spec();
  const int batch = spec.data().batch_size();
  TrainingData d;
  d.example_size = train->example_size();
  d.shape.steps_per_epoch =
      StepsPerEpoch(train->num_examples, num_shards, batch);
  d.shape.total_steps = TotalSteps(spec, train->num_examples, num_shards);
  if (d.shape.steps_per_epoch < 1 || d.shape.total_steps < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no full batch of ", batch, " per data shard: ", train->num_examples,
        " examples over ", num_shards, " shards"));
  }
  d.open_shard = [train,
                  seed = spec.data().shuffle_seed()](const data::ShardSpec& s) {
    return data::OpenIdxBatchReader(train, seed, s);
  };
  if (test != nullptr) {
    d.open_test = [test] { return data::OpenIdxBatchReaderInOrder(test); };
  }
  return d;
}

void LogBadLines(const char* what, int64_t bad,
                 const std::vector<std::string>& samples) {
  if (bad == 0) return;
  std::fprintf(stderr, "worker: %lld bad lines in the %s; first: %s\n",
               static_cast<long long>(bad), what,
               absl::StrJoin(samples, "; ").c_str());
}

// data.max_steps; or the job's shape as the coordinator has it (a worker
// counted it: one that resumes or rejoins does not count again); or epochs
// x the smallest shard's full batches, counted.
absl::Status ShapeTextData(const WorkerAssignment& a, int num_shards,
                           TrainingData& out) {
  const DataSpec& d = a.spec().data();
  DataShape& b = out.shape;
  if (d.max_steps() > 0) {
    b.steps_per_epoch = d.max_steps();
    b.total_steps = d.max_steps();
    return absl::OkStatus();
  }
  if (a.shard_steps() > 0 && a.steps_per_epoch() > 0) {
    b.steps_per_epoch = a.steps_per_epoch();
    b.total_steps = a.shard_steps();
    return absl::OkStatus();
  }
  data::ReaderStats stats;
  PS_ASSIGN_OR_RETURN(const std::vector<int64_t> counts,
                      Annotated(data::CountShardExamples(d, num_shards, &stats),
                                "counting the training examples"));
  const int64_t smallest = *std::min_element(counts.begin(), counts.end());
  std::fprintf(stderr,
               "worker: %lld training examples in %lld lines over %d data "
               "shards (the smallest holds %lld)\n",
               static_cast<long long>(stats.examples),
               static_cast<long long>(stats.lines), num_shards,
               static_cast<long long>(smallest));
  LogBadLines("training files", stats.bad_lines, stats.bad_line_samples);
  out.counted_bad_lines = stats.bad_lines;
  b.steps_per_epoch = smallest / d.batch_size();
  b.total_steps = d.epochs() * b.steps_per_epoch;
  if (b.steps_per_epoch < 1 || b.total_steps < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("no full batch of ", d.batch_size(),
                     " per data shard: the smallest of ", num_shards,
                     " data shards holds ", smallest, " examples"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingData> TextData(const WorkerAssignment& a,
                                      int num_shards) {
  const DataSpec& d = a.spec().data();
  PS_ASSIGN_OR_RETURN(std::unique_ptr<data::LineParser> parser,
                      data::ParserForSpec(d));
  TrainingData out;
  out.text = true;
  out.example_size = parser->schema().dense_dim;
  PS_RETURN_IF_ERROR(ShapeTextData(a, num_shards, out));
  out.open_shard = [d, files = std::vector<std::string>(d.train_files().begin(),
                                                        d.train_files().end())](
                       const data::ShardSpec& s) {
    return data::OpenSpecReader(d, files, d.shuffle_seed(), s);
  };
  if (!d.test_files().empty()) {
    DataSpec in_order = d;
    in_order.set_shuffle_buffer(0);
    out.open_test = [in_order,
                     files = std::vector<std::string>(d.test_files().begin(),
                                                      d.test_files().end())]() {
      return Annotated(data::OpenSpecReader(in_order, files, 0, {}),
                       "test files");
    };
  }
  return out;
}

}  // namespace

int64_t StepsPerEpoch(int64_t train_examples, int num_data_shards,
                      int batch_size) {
  if (num_data_shards < 1 || batch_size < 1) return 0;
  return train_examples / num_data_shards / batch_size;
}

int64_t TotalSteps(const JobSpec& spec, int64_t train_examples,
                   int num_data_shards) {
  if (spec.data().max_steps() > 0) return spec.data().max_steps();
  return spec.data().epochs() * StepsPerEpoch(train_examples, num_data_shards,
                                              spec.data().batch_size());
}

absl::StatusOr<TrainingData> OpenTrainingData(
    const WorkerAssignment& a, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, int num_shards) {
  if (a.spec().data().format() == DataSpec::IDX) {
    return IdxData(a, std::move(train), std::move(test), num_shards);
  }
  return TextData(a, num_shards);
}

}  // namespace ps::worker
