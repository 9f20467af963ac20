"""What the ps package costs one Python worker: the FM and DLRM of
examples/python/ on the same batches of a generated click log, timed

  local     as a plain PyTorch loop: torch.nn.EmbeddingBag (sparse
            gradients), torch.optim.Adam and SparseAdam; compute only;
  ps        through ps.torch.Trainer against a local cluster
            (`psctl cluster up --workers 0`, this process its only worker,
            BSP), dense gradients sent from backward (push_in_backward);
  ps-end    the same, dense gradients sent when the step's body returns.

Every mode runs --repeats times, the modes' order rotating each round, so
that a slow stretch of the machine falls on each. The batches are read once
(through ps.Data, as the examples read them) and turned into tensors before
any timing: neither side's figures include reading or parsing. Per mode:
examples/s over the timed steps (wall clock) and the mean step's split:
pull (rows pulled in forward), compute, push (dense gradients sent from
backward, and the end of the step with its wait for the next weights),
other (the loop between steps); locally forward+backward, the optimizers'
step and other. Each the median over the rounds, examples/s with its
range.
docs/performance/python.md.

  bazel build --config=nocuda //worker/python:all //server/... //tools/psctl \\
      //tools/data:all
  /usr/bin/python3 worker/python/bench/overhead.py --repeats 5
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))  # worker/python: the ps package
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))

import ctr_common  # noqa: E402
import ctr_dlrm  # noqa: E402
import ctr_fm  # noqa: E402
import ps  # noqa: E402
import ps.torch  # noqa: E402

# name: (the model, the job's Adam learning rate: the example's config's).
MODELS = {
    "fm": (lambda: ctr_fm.FM(), 0.005),
    "dlrm": (lambda: ctr_dlrm.DLRM(), 0.002),
    # DLRM with a 512-256 top MLP: dense tensors big enough (0.75 MB,
    # 0.5 MB) to leave the client during backward.
    "dlrm-wide": (lambda: ctr_dlrm.DLRM(top=(512, 256)), 0.002),
}
MODES = ("local", "ps", "ps-end")


class Cluster:
    """`psctl cluster up --workers 0` in a temporary directory, and this
    process as its worker."""

    def __init__(self, bin_dir, servers):
        self.psctl_path = os.path.join(bin_dir, "tools", "psctl", "psctl")
        self.tmp = tempfile.mkdtemp(prefix="ps-bench-")
        self.run_dir = os.path.join(self.tmp, "cluster")
        self.psctl("cluster", "up", "--servers", str(servers), "--workers", "0",
                   "--device", "cpu", "--bin_dir", bin_dir)
        self.worker = ps.Worker(
            coordinator_file=os.path.join(self.run_dir, "coordinator.addr"),
            token_file=os.path.join(self.run_dir, "token"),
        )

    def psctl(self, *args):
        r = subprocess.run([self.psctl_path, "--run_dir", self.run_dir, *args],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"psctl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r.stdout

    def job(self, spec_text):
        path = os.path.join(self.tmp, f"job{time.monotonic_ns()}.pbtxt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(spec_text)
        job_id = self.psctl("submit", path).split()[0]
        job = self.worker.wait_for_job(timeout_s=60)
        if job is None or job.id != job_id:
            raise RuntimeError(f"job {job_id} did not arrive: {job}")
        return job

    def down(self):
        self.worker.close()
        subprocess.run([self.psctl_path, "--run_dir", self.run_dir, "cluster", "down"],
                       capture_output=True, timeout=120)


def spec(name, model, lr, data_dir, batch_size, steps):
    return f"""
name: "{name}"
python {{}}
{ps.torch.model_spec(model)}
optimizer {{ kind: ADAM learning_rate: {lr} }}
consistency {{ model: BSP }}
data {{
  format: CRITEO
  train_files: "{data_dir}/train.txt"
  test_files: "{data_dir}/test.txt"
  batch_size: {batch_size}
  max_steps: {steps}
  shuffle_buffer: 10000
}}
num_workers: 1
seed: 1
"""


class Batches:
    """The job's batches by step.batch, read once and made tensors."""

    def __init__(self):
        self.by_address = {}

    def get(self, data, address):
        b = self.by_address.get(address)
        if b is None:
            raw = data.batch(address)
            keys, offsets, dense = ctr_common.inputs(raw)
            b = (keys, offsets, dense, torch.from_numpy(raw["labels"]))
            self.by_address[address] = b
        return b

    def in_order(self):
        return [self.by_address[k] for k in sorted(self.by_address, key=lambda a: (a[2], a[3]))]


def ps_run(cluster, model_name, batches, args, push_in_backward, record=True):
    make, lr = MODELS[model_name]
    torch.manual_seed(0)
    model = make()
    total = args.warmup + args.steps
    job = cluster.job(spec(f"bench-{model_name}", model, lr, args.data_dir,
                           args.batch_size, total))
    data = ps.Data(job)
    trainer = ps.torch.Trainer(job, model, push_in_backward=push_in_backward)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    ended, t_start = [], None
    for step in trainer.steps():
        keys, offsets, dense, labels = batches.get(data, step.batch)
        if step.next_batch is not None and args.prefetch:
            ps.torch.prefetch(model, batches.get(data, step.next_batch)[0])
        if step.clock == args.warmup:
            t_start = time.perf_counter()
        loss = loss_fn(model(keys, offsets, dense), labels)
        loss.backward()
        step.loss = loss
        ended.append(step)
    wall = time.perf_counter() - t_start
    trainer.finish()
    if not record:
        return None
    times = [s.times for s in ended if s.clock >= args.warmup]
    return {
        "examples_per_s": args.steps * args.batch_size / wall,
        "step_ms": 1000 * wall / args.steps,
        "pull_ms": 1000 * sum(t[0] for t in times) / len(times),
        "compute_ms": 1000 * sum(t[1] for t in times) / len(times),
        "push_ms": 1000 * sum(t[2] for t in times) / len(times),
    }


def local_run(model_name, batches, args):
    make, lr = MODELS[model_name]
    torch.manual_seed(0)
    model = make()
    ordered = batches.in_order()
    vocab = np.unique(np.concatenate([b[0].numpy() for b in ordered]))
    model, sparse = ctr_common.local_model(model, len(vocab))
    local = [
        (torch.from_numpy(np.searchsorted(vocab, k.numpy())), o, d, y)
        for k, o, d, y in ordered
    ]
    ids = {id(p) for p in sparse}
    dense_opt = torch.optim.Adam([p for p in model.parameters() if id(p) not in ids], lr=lr)
    sparse_opt = torch.optim.SparseAdam(sparse, lr=lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    fwd_bwd, update, t_start = [], [], None
    for i, (keys, offsets, dense, labels) in enumerate(local[: args.warmup + args.steps]):
        if i == args.warmup:
            t_start = time.perf_counter()
        t0 = time.perf_counter()
        dense_opt.zero_grad(set_to_none=True)
        sparse_opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(keys, offsets, dense), labels)
        loss.backward()
        t1 = time.perf_counter()
        dense_opt.step()
        sparse_opt.step()
        if i >= args.warmup:
            fwd_bwd.append(t1 - t0)
            update.append(time.perf_counter() - t1)
    wall = time.perf_counter() - t_start
    return {
        "examples_per_s": args.steps * args.batch_size / wall,
        "step_ms": 1000 * wall / args.steps,
        "compute_ms": 1000 * sum(fwd_bwd) / len(fwd_bwd),
        "update_ms": 1000 * sum(update) / len(update),
    }


def report(results, args):
    print(f"\n{args.steps} timed steps of {args.batch_size} after {args.warmup}; "
          f"{args.repeats} rounds; medians (range of examples/s); ms per step")
    print("| model | mode | examples/s | step | pull | compute | push / update | other |")
    print("|---|---|---|---|---|---|---|---|")
    for model_name in args.models:
        for mode in args.modes:
            runs = results[(model_name, mode)]
            rate = [r["examples_per_s"] for r in runs]

            for r in runs:
                r["other_ms"] = r["step_ms"] - sum(
                    r.get(k, 0) for k in ("pull_ms", "compute_ms", "push_ms", "update_ms"))

            def med(key):
                v = [r[key] for r in runs if key in r]
                return f"{statistics.median(v):.2f}" if v else "-"

            last = med("push_ms") if mode != "local" else med("update_ms")
            print(f"| {model_name} | {mode} | {statistics.median(rate):,.0f} "
                  f"({min(rate):,.0f}-{max(rate):,.0f}) | {med('step_ms')} | "
                  f"{med('pull_ms')} | {med('compute_ms')} | {last} | {med('other_ms')} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="fm,dlrm,dlrm-wide")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--steps", type=int, default=200, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch_size", type=int, default=256)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    ap.add_argument("--data_dir", default="", help="a click log (train.txt, "
                    "test.txt); default: criteo_gen's into a temporary directory")
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--prefetch", type=int, default=1, help="1: the embedding "
                    "bags prefetch the next batch's rows (as the examples do)")
    args = ap.parse_args()
    args.models = args.models.split(",")
    args.modes = args.modes.split(",")
    for m in args.models:
        if m not in MODELS:
            ap.error(f"--models: {m!r} is none of {list(MODELS)}")
    for m in args.modes:
        if m not in MODES:
            ap.error(f"--modes: {m!r} is none of {MODES}")
    bin_dir = os.path.realpath(args.bin_dir)
    torch.set_num_threads(args.threads)
    if not args.data_dir:
        args.data_dir = tempfile.mkdtemp(prefix="ps-bench-ctr-")
        lines = (args.warmup + args.steps) * args.batch_size + 1000
        subprocess.run([os.path.join(bin_dir, "tools", "data", "criteo_gen"),
                        f"--out_dir={args.data_dir}", f"--train_lines={lines}",
                        "--test_lines=1000", "--progress=false"],
                       check=True, capture_output=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; "
          f"torch {torch.__version__}, {args.threads} thread(s)", flush=True)
    cluster = Cluster(bin_dir, args.servers)
    results = {(m, mode): [] for m in args.models for mode in args.modes}
    try:
        batches = Batches()
        for m in args.models:  # reads the batches; warms the cluster up
            ps_run(cluster, m, batches, args, push_in_backward=True, record=False)
        for r in range(args.repeats):
            order = args.modes[r % len(args.modes):] + args.modes[: r % len(args.modes)]
            for m in args.models:
                for mode in order:
                    if mode == "local":
                        res = local_run(m, batches, args)
                    else:
                        res = ps_run(cluster, m, batches, args, push_in_backward=mode == "ps")
                    results[(m, mode)].append(res)
                    print(f"round {r} {m} {mode}: {res['examples_per_s']:,.0f} examples/s, "
                          f"{res['step_ms']:.2f} ms/step (load {os.getloadavg()[0]:.2f})",
                          flush=True)
    finally:
        cluster.down()
    report(results, args)


if __name__ == "__main__":
    main()
