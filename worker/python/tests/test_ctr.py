"""The PyTorch FM and DLRM of examples/python/ as two Python worker
processes on a generated click log (the project's Criteo reader through
ps.Data): the job succeeds, and its final test AUC is at least that of
configs/ctr_{fm,dlrm}_bsp.pbtxt (the same model in the layer language)
trained by two ps_worker daemons on the same data, less 0.005; its
evaluator worker also reported evaluations every data.eval_every_steps."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import HERE, Cluster, generator, status_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "examples", "python")


@pytest.fixture(scope="module")
def click_log(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ctr"))
    subprocess.run(
        [generator("criteo_gen"), f"--out_dir={d}", "--train_lines=60000", "--test_lines=10000",
         "--max_vocab=100", "--progress=false"],
        check=True, capture_output=True,
    )
    with open(os.path.join(d, "truth.json"), encoding="utf-8") as f:
        return d, json.load(f)


def with_data(spec, d):
    return spec.replace("/tmp/ctr", d).replace("epochs: 2", "epochs: 3")


CPP = {}


def cpp_run(click_log, config):
    """configs/<config> through two ps_worker daemons: (AUC, examples/s)."""
    if config in CPP:
        return CPP[config]
    d, _ = click_log
    with open(os.path.join(ROOT, "configs", config), encoding="utf-8") as f:
        spec = with_data(f.read(), d)
    spec = re.sub(r"eval_every_steps: \d+", "eval_every_steps: 100000", spec)
    spec = re.sub(r"eval_examples: \d+", "eval_examples: 0", spec)
    cluster = Cluster(servers=2, join=False, workers=2)
    try:
        job_id = cluster.submit(spec)
        assert cluster.wait_state(job_id, timeout_s=240) == "SUCCEEDED", cluster.logs()
        CPP[config] = status_of(cluster, job_id)
        return CPP[config]
    finally:
        cluster.down()


@pytest.mark.parametrize(
    "script,model",
    [("ctr_fm", "BSP"), ("ctr_fm", "ASP"), ("ctr_fm", "SSP staleness: 3"),
     ("ctr_dlrm", "BSP")],
)
def test_two_python_workers(click_log, script, model):
    d, truth = click_log
    cpp_auc, cpp_rate = cpp_run(click_log, f"{script}_bsp.pbtxt")
    with open(os.path.join(EXAMPLES, f"{script}_bsp.pbtxt"), encoding="utf-8") as f:
        spec = f.read()
    spec = with_data(spec, d).replace("model: BSP", f"model: {model}")
    spec = spec.replace("shuffle_buffer: 10000", "shuffle_buffer: 10000\n"
                        "  eval_every_steps: 100\n  eval_examples: 2000")
    cluster = Cluster(servers=2, join=False)
    try:
        env = dict(cluster.env, PYTHONPATH=os.path.dirname(HERE))
        workers = [
            subprocess.Popen(
                [sys.executable, os.path.join(EXAMPLES, f"{script}.py")],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for _ in range(2)
        ]
        job_id = cluster.submit(spec)
        state = cluster.wait_state(job_id, timeout_s=240)
        outs = [w.communicate(timeout=60)[0] for w in workers]
        assert state == "SUCCEEDED", "\n".join(outs) + cluster.logs()
        assert all(w.returncode == 0 for w in workers), "\n".join(outs)
        auc, rate = status_of(cluster, job_id)
        csv = cluster.psctl("metrics", job_id, "--format", "csv").stdout.splitlines()
        rows = [dict(zip(csv[0].split(","), line.split(","))) for line in csv[1:]]
        evals = sorted(int(r["step"]) for r in rows if r["name"] == "test_auc")
        # Every 100 steps, and the final model's.
        assert evals[0] == 100 and len(evals) >= 2 and evals[-1] > 100, evals
        print(
            f"{script} {model}: Python test AUC {auc:.4f} at {rate:.0f} "
            f"examples/s; ps_worker (BSP) {cpp_auc:.4f} at {cpp_rate:.0f}; "
            f"generator's true AUC {truth['true_test_auc']:.4f}"
        )
        assert auc >= cpp_auc - 0.005
    finally:
        cluster.down()


def test_ps_workers_start_the_script(click_log):
    """python { script } : two ps_worker daemons each start ctr_fm.py for
    their rank; a script that exits non-zero fails the job with its
    stderr's tail in the events."""
    d, _ = click_log
    with open(os.path.join(EXAMPLES, "ctr_fm_bsp.pbtxt"), encoding="utf-8") as f:
        spec = with_data(f.read(), d).replace("epochs: 3", "epochs: 1")
    script = os.path.join(EXAMPLES, "ctr_fm.py")
    spec = re.sub(r"^python \{\}.*$", f'python {{ script: "{script}" }}', spec, flags=re.M)
    bad = os.path.join(d, "bad.py")
    with open(bad, "w", encoding="utf-8") as f:
        f.write("import sys\nsys.stderr.write('no such table: ads\\n')\nsys.exit(3)\n")
    cluster = Cluster(servers=2, join=False, workers=2)
    try:
        job_id = cluster.submit(spec)
        assert cluster.wait_state(job_id, timeout_s=240) == "SUCCEEDED", cluster.logs()
        auc, _ = status_of(cluster, job_id)
        assert auc > 0.7
        bad_id = cluster.submit(spec.replace(script, bad))
        assert cluster.wait_state(bad_id, timeout_s=60) == "FAILED", cluster.logs()
        events = cluster.psctl("events", bad_id).stdout
        assert "exited with status 3; its stderr ends: no such table: ads" in events, events
    finally:
        cluster.down()
