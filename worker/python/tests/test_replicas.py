"""Replicated shards with a Python worker (docs/faults.md): a job with
`replication { factor: 2 }` on 3 servers; every step pushes a gradient of
1 to every dense element and to 16 rows (SGD, learning rate 1, zeros
initially), so the final values are known exactly: -steps. One server is
killed with SIGKILL mid-job (psctl restarts it without its state): its
shard fails over to its backup without a rollback, the worker follows it
(Access.set_server_addresses) and resends what was not acknowledged, and
every value still ends at exactly -steps under BSP, ASP and SSP(3): no
push lost, none applied twice. Then again with a second kill: once the
failed-over shard has a new backup (built by a state transfer onto a
server while the job trains), its new primary is killed too."""

import os
import re
import signal

import numpy as np
import pytest

import ps

STEPS = 300
KEYS = np.arange(16, dtype=np.int64)


def _kill_server_at_port(cluster, port):
    """SIGKILLs the cluster's ps_server listening on `port`; its name."""
    ports = os.path.join(cluster.run_dir, "ports")
    for name in sorted(os.listdir(ports)):
        if not name.startswith("server-"):
            continue
        with open(os.path.join(ports, name)) as f:
            if f.read().strip() != port:
                continue
        server = name[: -len(".port")]
        with open(os.path.join(cluster.run_dir, "pids", server + ".pid")) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        return server
    raise AssertionError(f"no server listens on port {port}")


FAILOVER = re.compile(
    r" failover +shard (\d+): primary member \d+ at \S+ is lost; its backup, "
    r"member \d+ at [^ ]*:(\d+),"
)


@pytest.mark.parametrize("model", ["BSP", "ASP", "SSP"])
@pytest.mark.parametrize("kills", [1, 2])
def test_failover_keeps_exact_sums(model, kills):
    from conftest import Cluster

    steps = STEPS if kills == 1 else 6 * STEPS
    cluster = Cluster(servers=3)
    try:
        job_id = cluster.submit(f"""
name: "py-replicas-{model.lower()}"
python {{}}
model {{
  tensors {{ name: "w" shape: [3000] init {{ kind: ZEROS }} }}
  sparse_tables {{ name: "emb" dim: 4 init {{ kind: ZEROS }} }}
}}
optimizer {{ kind: SGD learning_rate: 1 }}
consistency {{ model: {model} {"staleness: 3" if model == "SSP" else ""} }}
data {{ batch_size: 1 max_steps: {steps} }}
replication {{ factor: 2 }}
chunk_bytes: 4096
num_workers: 1
""")
        job = cluster.worker.wait_for_job(timeout_s=60)
        assert job is not None and job.id == job_id, cluster.logs()
        killed = 0
        with job:
            session = ps.Session(job)
            for step in session.steps():
                step.push_dense("w", np.ones(3000, dtype=np.float32))
                step.push_rows("emb", KEYS, np.ones((len(KEYS), 4), dtype=np.float32))
                if step.clock == STEPS // 3 and killed == 0:
                    with open(os.path.join(cluster.run_dir, "pids", "server-1.pid")) as f:
                        os.kill(int(f.read()), signal.SIGKILL)
                    killed = 1
                elif killed == 1 and kills == 2 and step.clock % 20 == 0:
                    # Once the failed-over shard has a backup again, its new
                    # primary goes too.
                    events = cluster.psctl("events", job_id).stdout
                    failover = FAILOVER.search(events)
                    if failover and re.search(
                        rf" backup_ready +shard {failover.group(1)}:", events
                    ):
                        _kill_server_at_port(cluster, failover.group(2))
                        killed = 2
            session.pull_weights()
            weights = session.dense
            rows = session.pull_rows("emb", KEYS)
            session.finish()
        events = cluster.psctl("events", job_id).stdout
        assert killed == kills, events
        np.testing.assert_array_equal(weights[0], np.full(3000, -steps, np.float32))
        np.testing.assert_array_equal(rows, np.full((len(KEYS), 4), -steps, np.float32))
        assert cluster.wait_state(job_id) == "SUCCEEDED", cluster.logs()
        events = cluster.psctl("events", job_id).stdout
        # (The second server killed was another shard's primary too.)
        shards = [shard for shard, _ in FAILOVER.findall(events)]
        assert shards.count(FAILOVER.search(events).group(1)) == kills, events
        assert not re.search(r"^\S+ \S+ +rollback", events, flags=re.M), events
    finally:
        cluster.down()
