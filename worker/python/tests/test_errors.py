"""Bad input gets a clear exception with the reason and changes nothing on
the shards."""

import os

import numpy as np
import pytest

import ps

SPEC = """
name: "py-errors"
python {}
model {
  tensors { name: "w" shape: [4, 3] init { kind: CONSTANT value: 0.5 } }
  sparse_tables { name: "items" dim: 4 }
}
optimizer { kind: SGD learning_rate: 0.1 }
consistency { model: BSP }
data { batch_size: 8 max_steps: 5 }
num_workers: 1
"""


def test_bad_input_is_refused_and_changes_nothing(cluster):
    job_id = cluster.submit(SPEC)
    job = cluster.worker.wait_for_job(timeout_s=60)
    assert job is not None and job.id == job_id

    with pytest.raises(ps.InvalidArgument, match=r"shape \(3, 4\).*\[4, 3\]|shape"):
        ps.Session(job, [np.zeros((3, 5), np.float32)])
    with pytest.raises(ps.InvalidArgument, match="float32"):
        ps.Session(job, [np.zeros((4, 3), np.float64)])

    session = ps.Session(job)
    keys = np.array([3, 7], np.int64)
    before = session.pull_rows("items", keys)
    with pytest.raises(ps.InvalidArgument, match="no sparse table 'nope'"):
        session.pull_rows("nope", keys)
    with pytest.raises(ps.InvalidArgument, match="expected integers"):
        session.pull_rows("items", np.array([1.5]))

    steps = session.steps()
    step = next(steps)
    # A key/row count mismatch: refused before anything is sent.
    with pytest.raises(ps.InvalidArgument, match="2 keys of table 0 .dim 4. need 8 floats, got 4"):
        session.access.push(step.clock, step.base_version, [], [(0, keys, np.zeros(4, np.float32))])
    with pytest.raises(ps.InvalidArgument, match="12 elements|has 12"):
        step.push_dense("w", np.zeros(5, np.float32))
    # A NaN gradient: the shard refuses the step's push with its reason.
    step.push_dense("w", np.full((4, 3), np.nan, np.float32))
    step.push_rows("items", keys, np.ones((2, 4), np.float32))
    with pytest.raises(ps.InvalidArgument, match="tensor 0 .'w'. holds NaN or Inf; nothing was sent"):
        next(steps)
    steps.close()
    # Nothing changed on the shards.
    np.testing.assert_array_equal(session.pull_rows("items", keys), before)
    session.pull_weights()
    np.testing.assert_array_equal(session.dense[0], np.full((4, 3), 0.5, np.float32))
    session.close()
    job.fail("the test's NaN gradient")
    assert cluster.wait_state(job_id) == "FAILED"
    assert "NaN gradient" in cluster.psctl("events", job_id).stdout


def test_missing_coordinator_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("PS_COORDINATOR", raising=False)
    monkeypatch.delenv("PS_COORDINATOR_FILE", raising=False)
    with pytest.raises(ValueError, match="no coordinator"):
        ps.Worker()


def test_an_exception_in_a_worker_fails_the_job_with_it():
    import subprocess
    import sys

    from conftest import HERE, Cluster

    cluster = Cluster(servers=1, join=False)
    try:
        script = (
            "import ps\n"
            "with ps.Worker() as worker, worker.wait_for_job() as job:\n"
            "    raise RuntimeError('shapes do not fit: 3 != 4')\n"
        )
        env = dict(cluster.env, PYTHONPATH=os.path.dirname(HERE))
        w = subprocess.Popen([sys.executable, "-c", script], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        job_id = cluster.submit(SPEC)
        assert cluster.wait_state(job_id, timeout_s=30) == "FAILED", cluster.logs()
        out = w.communicate(timeout=30)[0]
        assert w.returncode != 0, out
        assert "terminate called" not in out, out
        events = cluster.psctl("events", job_id).stdout
        assert "RuntimeError: shapes do not fit: 3 != 4" in events, events
    finally:
        cluster.down()
