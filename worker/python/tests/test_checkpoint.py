"""The numpy path end to end (no torch) and a job's checkpoint read back
into numpy: the newest checkpoint equals the weights and rows the worker
pulls at the end."""

import glob
import os

import numpy as np
import pytest

import ps

SPEC = """
name: "py-ckpt"
python {}
model {
  tensors { name: "w" shape: [4, 3] init { kind: CONSTANT value: 0.5 } }
  sparse_tables { name: "items" dim: 4 }
}
optimizer { kind: SGD learning_rate: 0.1 }
consistency { model: BSP }
data { batch_size: 8 max_steps: 100 }
checkpoint { every_versions: 50 }
num_workers: 1
"""


def test_numpy_session_and_checkpoint(cluster):
    job_id = cluster.submit(SPEC)
    job = cluster.worker.wait_for_job(timeout_s=60)
    assert job is not None and job.id == job_id
    session = ps.Session(job)
    keys = np.array([1, 5, 9], np.uint64)
    for step in session.steps():
        rows = step.pull_rows("items", keys)
        assert rows.shape == (3, 4)
        step.push_rows("items", keys, np.full((3, 4), 0.01 * (step.clock % 7), np.float32))
        step.push_dense("w", np.full((4, 3), 0.001 * step.clock, np.float32))
        step.loss = float(rows.sum())
    final_rows = session.pull_rows("items", keys)
    session.finish()
    final_w = session.dense[0].copy()
    # SGD on constant gradients: 0.5 - 0.1 * sum(0.001 * c for c < 100).
    np.testing.assert_allclose(final_w, np.full((4, 3), 0.5 - 0.1 * 0.001 * 4950), atol=1e-4)
    assert cluster.wait_state(job_id) == "SUCCEEDED"

    dirs = sorted(glob.glob(os.path.join(cluster.run_dir, "data", "server-*", job_id)))
    assert dirs, os.listdir(os.path.join(cluster.run_dir, "data"))
    ckpt = ps.read_checkpoint(*dirs)
    assert ckpt["job_id"] == job_id and ckpt["version"] == 100, ckpt["version"]
    np.testing.assert_array_equal(ckpt["tensors"]["w"], final_w)
    ckpt_keys, ckpt_rows = ckpt["tables"]["items"]
    order = np.argsort(ckpt_keys)
    np.testing.assert_array_equal(ckpt_keys[order], keys)
    np.testing.assert_array_equal(ckpt_rows[order], final_rows)
    earlier = ps.read_checkpoint(*dirs, version=50)
    assert earlier["version"] == 50
    assert not np.array_equal(earlier["tensors"]["w"], final_w)
    with pytest.raises(ValueError, match="no complete checkpoint at version 7"):
        ps.read_checkpoint(*dirs, version=7)
    # One shard's files alone are not a checkpoint of a 2-shard job.
    if len(dirs) > 1:
        with pytest.raises(ValueError, match="no complete checkpoint"):
            ps.read_checkpoint(dirs[0])
