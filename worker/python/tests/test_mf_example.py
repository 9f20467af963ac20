"""examples/python/mf.py, the docs' example, as two Python workers under
ASP on generated ratings: the job succeeds and its test RMSE beats the
constant predictor's (the generator's constant_rmse)."""

import json
import os
import re
import subprocess
import sys

from conftest import HERE, Cluster
from test_ctr import EXAMPLES, generator


def test_mf_example(tmp_path):
    d = str(tmp_path)
    subprocess.run(
        [generator("movielens_gen"), f"--out_dir={d}", "--train_lines=100000",
         "--test_lines=10000"],
        check=True, capture_output=True,
    )
    with open(os.path.join(d, "truth.json"), encoding="utf-8") as f:
        truth = json.load(f)
    with open(os.path.join(EXAMPLES, "mf_movielens_asp.pbtxt"), encoding="utf-8") as f:
        spec = f.read().replace("/tmp/ml", d)
    cluster = Cluster(servers=2, join=False)
    try:
        env = dict(cluster.env, PYTHONPATH=os.path.dirname(HERE))
        workers = [
            subprocess.Popen([sys.executable, os.path.join(EXAMPLES, "mf.py")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for _ in range(2)
        ]
        job_id = cluster.submit(spec)
        state = cluster.wait_state(job_id, timeout_s=180)
        outs = [w.communicate(timeout=60)[0] for w in workers]
        assert state == "SUCCEEDED", "\n".join(outs) + cluster.logs()
        status = cluster.psctl("status", job_id).stdout
        m = re.search(r"test RMSE\s+([0-9.]+)", status)
        assert m, status
        rmse = float(m.group(1))
        print(f"mf.py: test RMSE {rmse:.4f}; constant {truth['constant_rmse']:.4f}, "
              f"noise floor {truth['noise_floor_rmse']:.4f}")
        assert rmse < truth["constant_rmse"] - 0.05, status
    finally:
        cluster.down()
