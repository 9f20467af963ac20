// The data a worker trains on, whatever its format (DataSpec.format), as
// the one batch type (worker/data/batch.h) addressed by (data shard, epoch,
// batch): IDX images held in memory (worker/data/idx_batch_reader.h) or
// text files streamed (Criteo, libsvm, MovieLens: worker/data/
// spec_readers.h); the job's data shape; and the test data in order.
//
// The shape: a data shard has epochs x steps_per_epoch batches (or
// data.max_steps). IDX: steps_per_epoch = floor(train examples /
// (num_data_shards x batch_size)). Text: floor(the smallest data shard's
// examples / batch_size), the examples counted in one streaming pass over
// the training files at the job's start, or taken from the assignment when
// the coordinator has the count from a worker.
#ifndef PS_WORKER_LOOP_TRAINING_DATA_H_
#define PS_WORKER_LOOP_TRAINING_DATA_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "proto/coordinator_service.pb.h"
#include "worker/data/dataset.h"
#include "worker/data/shard_batches.h"
#include "worker/loop/evaluator.h"
#include "worker/loop/plan_batches.h"

namespace ps::worker {

struct TrainingData {
  // Dense values per example: the width of the model's dense inputs.
  int64_t example_size = 0;
  DataShape shape;
  // Text data: its bad lines are reported; those of the counting pass
  // (-1: none was made).
  bool text = false;
  int64_t counted_bad_lines = -1;
  // The readers of the training data shards (ShardBatches), and of the
  // test data in order (null: none).
  data::ShardBatches::Opener open_shard;
  TestReaderOpener open_test;
};

// The training data of `a` over `num_shards` data shards: for IDX `train`
// and `test` (test may be null), for a text format the spec's files.
// FAILED_PRECONDITION when a data shard holds no full batch; the readers'
// errors (text: INVALID_ARGUMENT once bad lines pass the spec's limit,
// naming the first ones by file:line).
absl::StatusOr<TrainingData> OpenTrainingData(
    const WorkerAssignment& a, std::shared_ptr<const Dataset> train,
    std::shared_ptr<const Dataset> test, int num_shards);

// Steps each worker runs for an IDX job (the same on every worker).
int64_t StepsPerEpoch(int64_t train_examples, int num_data_shards,
                      int batch_size);
int64_t TotalSteps(const JobSpec& spec, int64_t train_examples,
                   int num_data_shards);

}  // namespace ps::worker

#endif  // PS_WORKER_LOOP_TRAINING_DATA_H_
