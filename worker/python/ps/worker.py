"""ps.Worker and ps.Job: a Python process as one of a job's workers.

    worker = ps.Worker()            # PS_COORDINATOR / PS_TOKEN(_FILE) env
    job = worker.wait_for_job()     # the coordinator's assignment
    ...                             # ps.Session(job) or ps.torch.Trainer
    job.finish()                    # this worker's share is done

The worker registers and heartbeats like ps_worker; the job watches its
assignment (a STOP, a rollback or another job stops the steps with
ps.Cancelled) and reports metrics in ps_worker's series (train_loss,
examples_per_sec, step_time_ms, pull_ms, compute_ms, push_ms, staleness,
clock; test_* from job.report_eval), so psctl status, compare, explain and
events read it as any other worker's.
"""

import atexit
import os
import threading
import time
import traceback

from ps._loader import native as _native


def _env(name):
    return os.environ.get(name, "")


def _read_token(token, token_file):
    if token:
        return token
    token_file = token_file or _env("PS_TOKEN_FILE")
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            return f.read().strip()
    return _env("PS_TOKEN")


class Worker:
    """Registration with the coordinator and its heartbeats."""

    def __init__(
        self,
        coordinator=None,
        *,
        coordinator_file=None,
        token=None,
        token_file=None,
        tls_cert=None,
        tls_key=None,
        tls_ca=None,
        heartbeat_s=0.5,
        start_timeout_s=300.0,
    ):
        """The coordinator: `coordinator` (host:port) or `coordinator_file`
        (the coordinator's --coordinator_file), else PS_COORDINATOR or
        PS_COORDINATOR_FILE. The token: `token`, `token_file`,
        PS_TOKEN_FILE or PS_TOKEN. TLS files: the arguments or
        PS_TLS_CERT, PS_TLS_KEY, PS_TLS_CA. Started by a ps_worker for a
        job's python.script, PS_MEMBER_ID and PS_DEVICE name the member it
        speaks for (that ps_worker's)."""
        address = coordinator or _env("PS_COORDINATOR")
        file = coordinator_file or _env("PS_COORDINATOR_FILE")
        if not address and not file:
            raise ValueError(
                "ps.Worker: no coordinator: pass coordinator='host:port' or "
                "coordinator_file=, or set PS_COORDINATOR or "
                "PS_COORDINATOR_FILE"
            )
        self._token = _read_token(token, token_file)
        self._tls = (
            tls_cert or _env("PS_TLS_CERT"),
            tls_key or _env("PS_TLS_KEY"),
            tls_ca or _env("PS_TLS_CA"),
        )
        self._native = _native.Worker(
            address=address,
            file=file,
            token=self._token,
            heartbeat_s=heartbeat_s,
            start_timeout_s=start_timeout_s,
            tls_cert=self._tls[0],
            tls_key=self._tls[1],
            tls_ca=self._tls[2],
            member_id=int(_env("PS_MEMBER_ID") or 0),
            device=_env("PS_DEVICE") or "python",
        )
        self._seen = _native.Assignment()
        self._finished = ("", 0, 0)  # job id, membership epoch, incarnation
        # Stopped before the interpreter goes: its threads must not outlive
        # Python.
        atexit.register(self.close)

    @property
    def member_id(self):
        return self._native.member_id

    def _is_finished(self, a):
        job_id, epoch, incarnation = self._finished
        return a.job_id == job_id and (
            a.done or (a.membership_epoch <= epoch and a.incarnation <= incarnation)
        )

    def wait_for_job(self, timeout_s=None):
        """The next job to train (a ps.Job), or None after `timeout_s`
        (default: wait for good)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            a = self._native.wait_for_change(self._seen, 0.5)
            self._seen = a
            if a.command == "TRAIN" and not self._is_finished(a):
                return Job(self, a)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def close(self):
        """Stops heartbeating, after delivering the reports still queued."""
        self._native.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Job:
    """One assignment: the job's spec as the worker needs it, its
    parameters (through a ps.Session), its metrics."""

    def __init__(self, worker, assignment):
        self.worker = worker
        self.assignment = assignment
        a = assignment
        self.id = a.job_id
        self.rank = a.rank
        self.num_workers = a.num_workers
        self.num_data_shards = max(1, a.num_data_shards)
        self.start_step = a.start_step
        self.incarnation = a.incarnation
        self.consistency = a.consistency
        self.staleness = a.staleness
        self.batch_size = a.batch_size
        self.seed = a.seed
        self.spec_text = a.spec_text
        self.tensors = a.tensors  # [(name, shape)], model order
        self.tables = a.tables  # [(name, dim)], by index
        self.evaluator = a.evaluator
        self.others_done = a.others_done
        self.stopped = False
        self.rolled_back = False
        self._steps_per_epoch = 1
        self._t0 = time.monotonic()
        self._timing = {"pull": 0.0, "push": 0.0}  # inside the step body
        self._window = []
        self._stale = [0.0, 0]
        self.report_every_steps = 20
        self._watching = True
        self._over = False
        self._accesses = []
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        atexit.register(self._stop_watching)
        worker._native.set_data_shape(0, 0)
        worker._native.set_progress(self.id, self.start_step, self.incarnation)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """An exception out of the block fails the job with its message
        (psctl events shows it) instead of leaving the coordinator to notice
        the silence; ps.Cancelled (the job stopped or rolled back) does
        not. A block that ends without finish() closes the job."""
        stopped = exc_type is not None and issubclass(
            exc_type, (KeyboardInterrupt, _native.Cancelled)
        )
        if exc_type is not None and not self._over and not stopped:
            lines = traceback.format_exception_only(exc_type, exc)
            try:
                self.fail(f"Python worker: {''.join(lines).strip()}")
            except _native.Error:
                self.close()
        elif not self._over:
            self.close()
        return False

    def __repr__(self):
        return (
            f"ps.Job({self.id!r}, rank {self.rank}/{self.num_workers}, "
            f"{self.consistency})"
        )

    # -- the assignment ----------------------------------------------------
    def _watch(self):
        seen = self.assignment
        while self._watching:
            seen = self.worker._native.wait_for_change(seen, 0.2)
            if seen.command != "TRAIN" or seen.job_id != self.id:
                self.stopped = True
            elif seen.incarnation != self.incarnation:
                self.rolled_back = True
                self.stopped = True
            if self.stopped:  # the waits on the shards end too
                for access in self._accesses:
                    access.stop()
                return
            else:
                if list(seen.server_addresses) != list(self.assignment.server_addresses):
                    # A replicated shard failed over: no rollback, the calls
                    # in flight go on at the new address.
                    for access in self._accesses:
                        access.set_server_addresses(list(seen.server_addresses))
                self.evaluator = seen.evaluator
                self.others_done = seen.others_done
                self.assignment = seen

    def _check_running(self):
        if self.stopped:
            reason = "rolled back to a checkpoint" if self.rolled_back else "stopped"
            raise _native.Cancelled(f"job {self.id}: {reason}")

    def _data_shape(self, steps_per_epoch):
        a = self.assignment
        max_steps = a.max_steps
        if steps_per_epoch is None:
            steps_per_epoch = a.steps_per_epoch or (max_steps if max_steps > 0 else 0)
        if steps_per_epoch < 1:
            raise ValueError(
                f"job {self.id}: the job sets no data.max_steps, so the "
                "session needs steps_per_epoch (batches per epoch of one "
                "data shard of your data)"
            )
        shard_steps = max_steps if max_steps > 0 else a.epochs * steps_per_epoch
        self._steps_per_epoch = steps_per_epoch
        self.worker._native.set_data_shape(shard_steps, steps_per_epoch)
        return shard_steps, steps_per_epoch

    def _access(self, retry_s):
        tls = self.worker._tls
        access = _native.Access(
            self.assignment,
            self.worker.member_id,
            token=self.worker._token,
            retry_s=retry_s,
            tls_cert=tls[0],
            tls_key=tls[1],
            tls_ca=tls[2],
        )
        self._accesses.append(access)
        if self.stopped:
            access.stop()
        return access

    def _progress(self, clock):
        self.worker._native.set_progress(self.id, clock, self.incarnation)

    # -- metrics -----------------------------------------------------------
    def _point(self, name, value, step, final_model=False):
        return (
            name,
            float(value),
            int(step),
            step / self._steps_per_epoch,
            int((time.monotonic() - self._t0) * 1000),
            final_model,
        )

    def _staleness(self, staleness):
        self._stale[0] += staleness
        self._stale[1] += 1

    def _record_step(self, step, body_s, end_s):
        """A step's times: its body's pulls and pushes (rows pulled, dense
        gradients sent from backward) and its end's wait count as pull and
        push time, the rest of the body as compute; also in step.times."""
        pull, push = self._timing["pull"], self._timing["push"]
        self._timing["pull"] = self._timing["push"] = 0.0
        step.times = (pull, body_s - pull - push, push + end_s)
        self._window.append((step.loss, step.examples, *step.times))
        if len(self._window) >= self.report_every_steps:
            self._report_window(step.clock + 1)

    def _report_window(self, clock):
        w, self._window = self._window, []
        if not w:
            return
        n = len(w)
        losses = [x[0] for x in w if x[0] is not None]
        total = sum(x[2] + x[3] + x[4] for x in w)
        points = []
        if losses:
            points.append(self._point("train_loss", sum(float(l) for l in losses) / len(losses), clock))
        points += [
            self._point("examples_per_sec", sum(x[1] for x in w) / max(total, 1e-9), clock),
            self._point("step_time_ms", total * 1000 / n, clock),
            self._point("wait_ms", 0.0, clock),
            self._point("pull_ms", sum(x[2] for x in w) * 1000 / n, clock),
            self._point("compute_ms", sum(x[3] for x in w) * 1000 / n, clock),
            self._point("push_ms", sum(x[4] for x in w) * 1000 / n, clock),
            self._point("staleness", self._stale[0] / max(1, self._stale[1]), clock),
            self._point("clock", clock, clock),
        ]
        self._stale = [0.0, 0]
        self.worker._native.report(self.id, self.incarnation, points, False)

    def report(self, step, **values):
        """Reports metric points (name=value) at `step`."""
        points = [self._point(k, v, step) for k, v in values.items()]
        self.worker._native.report(self.id, self.incarnation, points, False)

    def report_eval(self, step, final_model=False, **values):
        """Reports an evaluation (test_accuracy=..., test_auc=...,
        test_loss=...); `final_model`: of the job's final weights."""
        points = [self._point(k, v, step, final_model) for k, v in values.items()]
        self.worker._native.report(self.id, self.incarnation, points, False)

    def finish(self, clock, evaluate=None, timeout_s=None):
        """This worker's share of the job ended at `clock`: its last
        metrics and the done mark go to the coordinator. Returns when the
        job is over (or after `timeout_s`), as ps_worker would stay: once
        every worker is done the coordinator may ask the evaluator (this
        worker, or this one after the evaluator left) for an evaluation of
        the final model: `evaluate()` (if given) is then called and returns
        the test_* values to report (e.g. {"test_auc": 0.79}), with
        final_model set."""
        # The watcher first: once the done mark is out, the assignment it
        # would take is the coordinator's answer to it, which the loop below
        # must see as a change.
        self._stop_watching()
        seen = self.assignment
        epoch = seen.membership_epoch
        self._progress(clock)
        self._report_window(clock)
        self.worker._native.report(self.id, self.incarnation, [], True)
        self.worker._native.flush(30.0)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while deadline is None or time.monotonic() < deadline:
            seen = self.worker._native.wait_for_change(seen, 0.5)
            if seen.command != "TRAIN" or seen.job_id != self.id:
                break  # the job is over
            if seen.incarnation != self.incarnation:
                raise _native.Cancelled(
                    f"job {self.id}: rolled back to a checkpoint after this "
                    "worker finished"
                )
            if seen.done or seen.membership_epoch == epoch:
                continue
            # Done again at a later membership epoch: the final evaluation
            # (the evaluator), or a plan that grew past `clock`.
            epoch = seen.membership_epoch
            if seen.plan_end(seen.shard_steps or 1) > clock:
                raise _native.Error(
                    f"job {self.id}: the coordinator gave this worker more "
                    f"data past step {clock} after it finished; train on "
                    "with a new Session over worker.wait_for_job()"
                )
            if seen.evaluator and evaluate is not None:
                values = evaluate()
                self.report_eval(clock, final_model=True, **values)
            self.worker._native.set_progress(self.id, clock, self.incarnation)
            self.worker._native.report(self.id, self.incarnation, [], True)
            self.worker._native.flush(30.0)
        self.worker._finished = (self.id, epoch, self.incarnation)
        self.close()

    def fail(self, message):
        """Reports this worker's failure of the job (the job fails with
        `message` in psctl events)."""
        self.worker._native.report_failure(self.id, str(message))
        self.close()

    def _stop_watching(self):
        self._watching = False
        if self._watcher.is_alive() and threading.current_thread() is not self._watcher:
            self._watcher.join()

    def close(self):
        self._over = True
        self._stop_watching()
        self.worker._native.set_progress("", 0, 0)
