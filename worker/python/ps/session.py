"""ps.Session: one worker's steps over the job's parameters, in numpy.

The dense tensors live in arrays the session owns or is given (a torch
module's parameters, viewed as numpy: ps.torch), in the job's model order;
each step's weights arrive in them in place. Sparse rows are pulled for a
batch's unique keys; gradients go back summed per unique key.

    session = ps.Session(job, steps_per_epoch=100)
    for step in session.steps():
        rows = step.pull_rows("items", keys)      # unique keys
        ...                                       # compute gradients
        step.push_rows("items", keys, row_grads)
        step.push_dense(0, grad)
        step.loss = loss

A step ends when the loop body returns to the loop: its gradients travel
with the end of step (a dense one given with now=True has left already,
while the body went on), which brings back the next step's weights (and
any rows asked for with step.prefetch_rows). The job's consistency model (BSP,
ASP, SSP with its staleness bound) decides how long each wait is.
"""

import time

import numpy as np

from ps._loader import native as _native


class Step:
    """One step: its clock, its batch in the worker's data plan, and what
    it sends."""

    def __init__(self, session, clock, base_version, batch, next_batch=None):
        self.clock = clock
        self.base_version = base_version
        # (data shard, batch of the shard from 0 across epochs, epoch,
        # batch within the epoch): which examples this clock trains.
        self.batch = batch
        # The batch the next clock trains as the plan stands (None after
        # the last): whose rows to prefetch.
        self.next_batch = next_batch
        self.loss = None
        # Once the step ended: (pull, compute, push) seconds, as its
        # metrics count them.
        self.times = None
        self.examples = session.job.batch_size
        self._session = session
        self._dense = {}  # sent with the end of the step
        self._sent = set()  # sent at once (push_dense now=True)
        self._rows = []
        self._next_rows = []

    def pull_rows(self, table, keys):
        """The rows of `keys` (unique, int64 or uint64) of sparse table
        `table` (name or index) at this step, as a new float32 array of
        len(keys) x dim; the rows a previous step prefetched for the same
        keys come without a call."""
        return self._session._pull_rows(self, table, keys)

    def prefetch_rows(self, table, keys):
        """Asks for the next step's rows of `keys` to come back with this
        step's end (as ps_worker's next batch's rows ride on its pushes)."""
        index, dim = self._session._table(table)
        keys = _keys(keys)
        rows = np.empty((len(keys), dim), dtype=np.float32)
        self._next_rows.append((index, keys, rows))

    def push_dense(self, index, grad, now=False):
        """The gradient of dense tensor `index` (name or model order) for
        this step: sent with the end of the step, or with `now` at once,
        while the caller computes the rest (ps.torch.Trainer does so from
        backward). A gradient sent at once is checked for NaN and Inf by
        itself (the step's gradients sent before it have gone) and must
        not change until the step ends; a tensor sent at once takes no
        second gradient in the step."""
        session = self._session
        i = session._tensor(index)
        grad = np.ascontiguousarray(grad, dtype=np.float32)
        expected = session.dense[i].size
        if grad.size != expected:
            raise _native.InvalidArgument(
                f"gradient of tensor {i} ('{session.job.tensors[i][0]}'): "
                f"{grad.size} elements, the tensor has {expected}"
            )
        if i in self._sent or (now and i in self._dense):
            raise _native.InvalidArgument(
                f"step {self.clock}: a second gradient of tensor {i} "
                f"('{session.job.tensors[i][0]}'); its first was "
                f"{'sent' if i in self._sent else 'given'} already"
            )
        if not now:
            self._dense[i] = grad
            return
        session._check_finite([(i, grad, 0)], [], sent_before=bool(self._sent))
        t0 = time.perf_counter()
        session.access.push(self.clock, self.base_version, [(i, grad, 0)], [])
        session.job._timing["push"] += time.perf_counter() - t0
        self._sent.add(i)

    def push_rows(self, table, keys, grads):
        """Row gradients of sparse table `table`: unique `keys` and
        len(keys) x dim float32 gradients (duplicates summed first)."""
        index, _ = self._session._table(table)
        self._rows.append(
            (index, _keys(keys), np.ascontiguousarray(grads, dtype=np.float32))
        )


def _keys(keys):
    keys = np.asarray(keys)
    if keys.dtype not in (np.int64, np.uint64):
        if not np.issubdtype(keys.dtype, np.integer):
            raise _native.InvalidArgument(
                f"keys: expected integers, got dtype {keys.dtype}"
            )
        keys = keys.astype(np.int64)
    return np.ascontiguousarray(keys.reshape(-1))


def _merge_rows(rows):
    """One push per table: the gradients of a table pushed more than once in
    a step (two bags over one table) summed per unique key."""
    by_table = {}
    for table, keys, grads in rows:
        by_table.setdefault(table, []).append((keys, grads))
    out = []
    for table, parts in by_table.items():
        if len(parts) == 1:
            out.append((table, parts[0][0], parts[0][1]))
            continue
        keys = np.concatenate([k for k, _ in parts])
        grads = np.concatenate([g.reshape(len(k), -1) for k, g in parts])
        unique, inverse = np.unique(keys, return_inverse=True)
        summed = np.zeros((len(unique), grads.shape[1]), dtype=np.float32)
        np.add.at(summed, inverse, grads)
        out.append((table, unique, summed))
    return out


class Session:
    """A worker's steps over the job's parameters (see the module's doc)."""

    def __init__(
        self,
        job,
        tensors=None,
        steps_per_epoch=None,
        report_every_steps=20,
        retry_s=60.0,
    ):
        """`tensors`: float32 C-contiguous arrays, one per job tensor in
        model order, that receive the weights (default: new zeroed ones).
        `steps_per_epoch`: batches per epoch of one data shard (the user's
        data; needed unless the job sets data.max_steps)."""
        self.job = job
        shapes = [tuple(shape) for _, shape in job.tensors]
        if tensors is None:
            tensors = [np.zeros(s, dtype=np.float32) for s in shapes]
        tensors = list(tensors)
        if len(tensors) != len(shapes):
            raise _native.InvalidArgument(
                f"{len(tensors)} dense tensors given, the job has "
                f"{len(shapes)}: {[n for n, _ in job.tensors]}"
            )
        for i, (a, s) in enumerate(zip(tensors, shapes)):
            if (
                not isinstance(a, np.ndarray)
                or a.dtype != np.float32
                or not a.flags.c_contiguous
                or not a.flags.writeable
            ):
                raise _native.InvalidArgument(
                    f"tensor {i} ('{job.tensors[i][0]}'): expected a writable "
                    f"C-contiguous float32 numpy array"
                )
            if a.size != int(np.prod(s, dtype=np.int64)):
                raise _native.InvalidArgument(
                    f"tensor {i} ('{job.tensors[i][0]}'): shape {a.shape}, "
                    f"the job has {list(s)}"
                )
        self.dense = tensors
        self._names = {n: i for i, (n, _) in enumerate(job.tensors)}
        self._tables = {n: (i, d) for i, (n, d) in enumerate(job.tables)}
        self.shard_steps, self.steps_per_epoch = job._data_shape(steps_per_epoch)
        self.total_steps = job.assignment.plan_end(self.shard_steps)
        job.report_every_steps = max(1, int(report_every_steps))  # Job's window
        self.access = job._access(retry_s)
        self.clock = job.start_step
        self.version = 0
        self._prefetched = {}  # table -> [(keys, rows)] for this step
        self._weights_ready = False

    # -- lookups ---------------------------------------------------------
    def _tensor(self, index):
        if isinstance(index, str):
            if index not in self._names:
                raise _native.InvalidArgument(
                    f"no dense tensor '{index}' (the job has "
                    f"{list(self._names)})"
                )
            return self._names[index]
        if not 0 <= index < len(self.dense):
            raise _native.InvalidArgument(
                f"no dense tensor {index} (the job has {len(self.dense)})"
            )
        return index

    def _table(self, table):
        if isinstance(table, str):
            if table not in self._tables:
                raise _native.InvalidArgument(
                    f"no sparse table '{table}' (the job has "
                    f"{list(self._tables)})"
                )
            return self._tables[table]
        if not 0 <= table < len(self.job.tables):
            raise _native.InvalidArgument(
                f"no sparse table {table} (the job has {len(self.job.tables)})"
            )
        return table, self.job.tables[table][1]

    def _pull_rows(self, step, table, keys):
        index, dim = self._table(table)
        keys = _keys(keys)
        got = self._prefetched.get(index, [])
        for i, (k, rows) in enumerate(got):
            if np.array_equal(k, keys):
                del got[i]
                return rows
        rows = np.empty((len(keys), dim), dtype=np.float32)
        t0 = time.perf_counter()
        self.access.pull(step.clock, [], [(index, keys, rows)]).wait()
        self.job._timing["pull"] += time.perf_counter() - t0
        return rows

    # -- the loop --------------------------------------------------------
    def pull_rows(self, table, keys):
        """Rows of `keys` of `table` at the session's clock, outside a step
        (e.g. for evaluation or a reference copy)."""
        index, dim = self._table(table)
        keys = _keys(keys)
        rows = np.empty((len(keys), dim), dtype=np.float32)
        self.access.pull(self.clock, [], [(index, keys, rows)]).wait()
        return rows

    def pull_weights(self):
        """Brings the current weights into the dense arrays (e.g. after
        the loop, for evaluation)."""
        if self.dense:
            self.version, _ = self.access.pull(self.clock, self.dense, []).wait()

    def steps(self, evaluate=None):
        """Yields a Step per clock of the worker's data plan, ending each
        when the loop body returns; stops when the plan ends, or raises
        ps.Cancelled when the job is stopped or rolled back. With
        `evaluate`, the job's evaluator worker calls it every
        data.eval_every_steps steps of the job (as ps_worker's evaluator
        evaluates: between steps, with the weights the step's end brought)
        and reports the test_* values it returns at that step (psctl
        status, compare); the final model's evaluation is finish()'s."""
        job = self.job
        bsp = job.consistency == "BSP"
        if not self._weights_ready:
            t0 = time.perf_counter()
            # BSP: take the clock from the step the shards are at.
            self.version, _ = self.access.pull(
                self.clock, self.dense, [], current=bsp
            ).wait()
            job._timing["pull"] += time.perf_counter() - t0
            if bsp and self.version > self.clock:
                self.clock = self.version
            self._weights_ready = True
        while True:
            self.total_steps = job.assignment.plan_end(self.shard_steps)
            if self.clock >= self.total_steps:
                break
            job._check_running()
            batch = job.assignment.batch_at(
                self.clock, self.shard_steps, self.steps_per_epoch
            )
            next_batch = None
            if self.clock + 1 < self.total_steps:
                next_batch = job.assignment.batch_at(
                    self.clock + 1, self.shard_steps, self.steps_per_epoch
                )
            step = Step(self, self.clock, self.version, batch, next_batch)
            t_compute = time.perf_counter()
            yield step
            t_end = time.perf_counter()
            self._end(step, last=self.clock + 1 >= self.total_steps)
            job._record_step(step, t_end - t_compute, time.perf_counter() - t_end)
            self.clock += 1
            if bsp and self.version > self.clock:
                self.clock = self.version
            job._progress(self.clock)
            every = job.assignment.eval_every_steps
            if (
                evaluate is not None
                and every > 0
                and job.evaluator
                and self.clock % every == 0
                and self.clock < self.total_steps
            ):
                job.report_eval(self.clock, **evaluate())
        job._progress(self.clock)

    def _check_finite(self, dense, rows, sent_before=False):
        """Refuses a step with a NaN or Inf gradient before any of it is
        sent: the shards would refuse it each for itself, and those that
        hold none of it would apply the rest. `sent_before`: some of the
        step's gradients went at once before (push_dense now=True)."""
        if self.job.assignment.allow_nonfinite_gradients:
            return
        sent = (
            "this one was not sent, the step's gradients sent at once "
            "before it were"
            if sent_before
            else "nothing was sent"
        )
        for i, g, _ in dense:
            if not np.isfinite(g).all():
                raise _native.InvalidArgument(
                    f"step {self.clock}: the gradient of tensor {i} "
                    f"('{self.job.tensors[i][0]}') holds NaN or Inf; {sent} "
                    "(the job sets no allow_nonfinite_gradients)"
                )
        for table, _, g in rows:
            if not np.isfinite(g).all():
                raise _native.InvalidArgument(
                    f"step {self.clock}: a row gradient of table "
                    f"'{self.job.tables[table][0]}' holds NaN or Inf; {sent} "
                    "(the job sets no allow_nonfinite_gradients)"
                )

    def _end(self, step, last):
        dense = [(i, g, 0) for i, g in sorted(step._dense.items())]
        rows = _merge_rows(step._rows)
        self._check_finite(dense, rows, sent_before=bool(step._sent))
        next_rows = [] if last else step._next_rows
        call = self.access.end_step(
            step.clock,
            step.base_version,
            dense,
            rows,
            next_rows,
            [] if last else self.dense,
        )
        version, staleness = call.wait()
        self.job._staleness(staleness)
        if not last:
            self.version = version
            self._prefetched = {}
            for t, k, r in next_rows:
                self._prefetched.setdefault(t, []).append((k, r))

    def finish(self, evaluate=None):
        """Ends this worker's share (after steps() ran out): pulls the final
        weights into the dense arrays, reports done (Job.finish, which
        calls `evaluate` for the final model's evaluation when the
        coordinator asks this worker for it) and closes the connections."""
        self.pull_weights()
        try:
            self.job.finish(self.clock, evaluate)
        finally:
            self.close()

    def close(self):
        self.access.close()
