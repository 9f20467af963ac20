"""ps.Data: the job's data through the worker's own readers.

    data = ps.Data(job)            # data.format / train_files / test_files
    session = ps.Session(job, steps_per_epoch=data.steps_per_epoch)
    for step in session.steps():
        batch = data.batch(step)   # the batch the worker's data plan names
        batch["dense"], batch["labels"], batch["sparse"]["C1"]  # numpy

Text formats (Criteo, libsvm, MovieLens) and IDX images (Fashion-MNIST,
data.path) as ps_worker reads them: the same shards, shuffle and batch
addresses, so the coordinator's data plans, a dead worker's leftover data
and a rejoining worker's catch-up work as for ps_worker. A batch is a
dict: size, dense [size, dense_dim] float32 (IDX: the pixels, scaled and
centred as ps_worker's unless data.no_normalize), labels [size] (float32;
int32 classes) or None, sparse {field: (keys uint64, offsets int64
[size + 1], weights float32 or None)}.
"""

from ps._loader import native as _native


class Data:
    def __init__(self, job, data_root=""):
        """`data_root`: IDX data only, the directory of the .gz files on
        this host instead of the job's data.path."""
        self._native = _native.Data(job.assignment, data_root)
        self._recent = []  # [(address, batch)], the newest first
        # Counted in one pass over the training files unless the job sets
        # data.max_steps or a worker counted them already.
        self.shard_steps, self.steps_per_epoch = self._native.shape()

    def batch(self, step):
        """The batch of `step` (a ps.Step), or at an address (step.batch,
        step.next_batch): its data shard's batch in its epoch. The last two
        batches read are kept: reading the next step's batch ahead (to
        prefetch its rows) does not read it twice."""
        address = tuple(getattr(step, "batch", step))
        for a, b in self._recent:
            if a == address:
                return b
        shard, _, epoch, index = address
        b = self._native.batch_at(shard, epoch, index)
        self._recent = [(address, b)] + self._recent[:1]
        return b

    def test_batches(self, batch_size=4096, max_examples=0):
        """The test files in order, as batches (max_examples 0: all)."""
        return self._native.test_batches(batch_size, max_examples)

    @property
    def bad_lines(self):
        return self._native.bad_lines
