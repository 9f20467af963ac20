"""The PyTorch FM side by side with ps_worker's FM and with one PyTorch
process, on one cluster and one click log (docs/performance/python.md):

  python     examples/python/ctr_fm.py as the job's two workers, started
             by the cluster's two ps_worker daemons (python { script }), BSP
  ps_worker  configs/ctr_fm_bsp.pbtxt, the same model in the layer
             language, through the same two ps_worker daemons, BSP
  torch      the same module in this one process by plain PyTorch
             (ctr_common.local_model: torch.nn.EmbeddingBag, Adam and
             SparseAdam at the job's learning rate), batches of 512 (BSP's
             two workers' 256 each), torch on both cores

each one epoch of the same log, the three alternated --rounds times. Every
--eval_every steps of 512 examples the first --test_lines test lines are
scored. Per run: examples/s, seconds from the job's start (its workers'
first report; torch: the first step, after this script's reading) to its
end and to the first evaluation at --target test AUC or better, and the
final AUC. Prints each run, then medians and ranges.

  bazel build --config=nocuda //worker/python:all //server/... //tools/psctl \\
      //tools/data:all //worker:ps_worker
  /usr/bin/python3 worker/python/bench/side_by_side.py --rounds 3
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PACKAGE = os.path.dirname(HERE)  # worker/python
EXAMPLES = os.path.join(ROOT, "examples", "python")
sys.path.insert(0, PACKAGE)
sys.path.insert(0, EXAMPLES)

import ctr_common  # noqa: E402
import ctr_fm  # noqa: E402


class Cluster:
    """`psctl cluster up --servers 2 --workers 2` in a temporary directory;
    the ps_worker daemons run both kinds of job."""

    def __init__(self, bin_dir):
        self.psctl_path = os.path.join(bin_dir, "tools", "psctl", "psctl")
        self.run_dir = os.path.join(tempfile.mkdtemp(prefix="ps-side-"), "cluster")
        self.psctl("cluster", "up", "--servers", "2", "--workers", "2", "--device", "cpu",
                   "--bin_dir", bin_dir)

    def psctl(self, *args):
        env = dict(os.environ, PYTHONPATH=PACKAGE)  # for the scripts ps_worker starts
        r = subprocess.run([self.psctl_path, "--run_dir", self.run_dir, *args],
                           capture_output=True, text=True, timeout=120, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"psctl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r.stdout

    def run(self, spec_text, target):
        """Submits, waits for the end: (examples/s, seconds to the end, to
        the target, final AUC), the times from the first metric point."""
        path = os.path.join(os.path.dirname(self.run_dir), f"job{time.monotonic_ns()}.pbtxt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(spec_text)
        job = self.psctl("submit", path).split()[0]
        while True:
            status = self.psctl("status", job)
            state = re.search(r"^state\s+(\w+)", status, re.M).group(1)
            if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.5)
        if state != "SUCCEEDED":
            raise RuntimeError(f"job {job} ended {state}:\n{self.psctl('events', job)}")
        rate = float(re.search(r"throughput\s+([0-9.]+) examples/s", status).group(1))
        lines = self.psctl("metrics", job, "--format", "csv").splitlines()
        rows = [dict(zip(lines[0].split(","), ln.split(","))) for ln in lines[1:]]
        start = min(int(r["time_ms"]) for r in rows)
        end = max(int(r["time_ms"]) for r in rows)
        evals = sorted((int(r["time_ms"]), float(r["value"]))
                       for r in rows if r["name"] == "test_auc")
        reached = [t for t, v in evals if v >= target]
        return (rate, (end - start) / 1000,
                (reached[0] - start) / 1000 if reached else None, evals[-1][1])

    def down(self):
        subprocess.run([self.psctl_path, "--run_dir", self.run_dir, "cluster", "down"],
                       capture_output=True, timeout=120)


def with_settings(text, args, lr=None):
    text = text.replace("/tmp/ctr", args.data_dir)
    text = re.sub(r"epochs: \d+", "epochs: 1", text)
    text = re.sub(r"\s*eval_every_steps: \d+", "", text)
    text = re.sub(r"\s*eval_examples: \d+", "", text)
    text = re.sub(r"\n\s*target \{[^}]*\}", "", text)
    text = text.replace("shuffle_buffer: 10000", "shuffle_buffer: 10000\n"
                        f"  eval_every_steps: {args.eval_every}\n"
                        f"  eval_examples: {args.test_lines}")
    return text


def torch_run(log, args):
    """The FM in this process: (examples/s, seconds to the end, to the
    target, final AUC)."""
    train, test, keys = log
    torch.manual_seed(1)
    model, tables = ctr_common.local_model(ctr_fm.FM(), keys)
    ids = {id(p) for p in tables}
    opt = torch.optim.Adam([p for p in model.parameters() if id(p) not in ids], lr=args.lr)
    sparse_opt = torch.optim.SparseAdam(tables, lr=args.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    n = len(train[2])

    def auc():
        with torch.no_grad():
            k, o, x, y = ctr_common.local_batch(test, 0, args.test_lines)
            return ctr_common.auc(torch.sigmoid(model(k, o, x)).numpy(), y.numpy())

    t0, reached, step, final = time.perf_counter(), None, 0, None
    for lo in range(0, n - 511, 512):
        k, o, x, y = ctr_common.local_batch(train, lo, lo + 512)
        opt.zero_grad(set_to_none=True)
        sparse_opt.zero_grad(set_to_none=True)
        loss_fn(model(k, o, x), y).backward()
        opt.step()
        sparse_opt.step()
        step += 1
        if step % args.eval_every == 0:
            final = auc()
            if reached is None and final >= args.target:
                reached = time.perf_counter() - t0
    steps_s = time.perf_counter() - t0
    final = auc()
    if reached is None and final >= args.target:
        reached = time.perf_counter() - t0
    return step * 512 / steps_s, time.perf_counter() - t0, reached, final


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train_lines", type=int, default=500000)
    ap.add_argument("--test_lines", type=int, default=20000)
    ap.add_argument("--eval_every", type=int, default=100, help="steps of 512 examples")
    ap.add_argument("--target", type=float, default=0.78, help="test AUC")
    ap.add_argument("--data_dir", default="", help="a click log (train.txt, test.txt); "
                    "default: criteo_gen's (--max_vocab=100, as configs/ctr_fm_*)")
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    args = ap.parse_args()
    bin_dir = os.path.realpath(args.bin_dir)
    with open(os.path.join(ROOT, "configs", "ctr_fm_bsp.pbtxt"), encoding="utf-8") as f:
        cpp_spec = f.read()
    args.lr = float(re.search(r"learning_rate: ([0-9.]+)", cpp_spec).group(1))
    if not args.data_dir:
        args.data_dir = tempfile.mkdtemp(prefix="ps-side-ctr-")
        subprocess.run([os.path.join(bin_dir, "tools", "data", "criteo_gen"),
                        f"--out_dir={args.data_dir}", f"--train_lines={args.train_lines}",
                        f"--test_lines={args.test_lines}", "--max_vocab=100",
                        "--progress=false"], check=True, capture_output=True)
    with open(os.path.join(EXAMPLES, "ctr_fm_bsp.pbtxt"), encoding="utf-8") as f:
        py_spec = f.read()
    py_spec = re.sub(r"^python \{\}.*$",
                     f'python {{ script: "{os.path.join(EXAMPLES, "ctr_fm.py")}" }}',
                     py_spec, flags=re.M)
    specs = {"python": with_settings(py_spec, args), "ps_worker": with_settings(cpp_spec, args)}
    vocab = {}
    train = ctr_common.read_log(os.path.join(args.data_dir, "train.txt"), vocab)
    test = ctr_common.read_log(os.path.join(args.data_dir, "test.txt"), vocab)
    log = (train, test, len(vocab))
    torch.set_num_threads(2)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {len(train[2])} train lines, "
          f"target test AUC {args.target}, evaluations every {args.eval_every} steps of 512",
          flush=True)
    cluster = Cluster(bin_dir)
    modes = ["python", "ps_worker", "torch"]
    results = {m: [] for m in modes}
    try:
        for r in range(args.rounds):
            for mode in modes[r % 3:] + modes[:r % 3]:
                if mode == "torch":
                    res = torch_run(log, args)
                else:
                    res = cluster.run(specs[mode], args.target)
                results[mode].append(res)
                reached = "not reached" if res[2] is None else f"{res[2]:.1f} s"
                print(f"round {r} {mode}: {res[0]:,.0f} examples/s, {res[1]:.1f} s, "
                      f"target {reached}, final AUC {res[3]:.4f} "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        cluster.down()

    def summary(values, fmt):
        if any(v is None for v in values):
            return "not always reached"
        return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-" \
               f"{fmt.format(max(values))})"

    print(f"\n{args.rounds} rounds; medians (ranges)")
    print("| run | examples/s | seconds to the end | seconds to AUC "
          f"{args.target} | final test AUC |")
    print("|---|---|---|---|---|")
    for mode in modes:
        v = results[mode]
        print(f"| {mode} | {summary([x[0] for x in v], '{:,.0f}')} | "
              f"{summary([x[1] for x in v], '{:.1f}')} | "
              f"{summary([x[2] for x in v], '{:.1f}')} | "
              f"{summary([x[3] for x in v], '{:.4f}')} |")


if __name__ == "__main__":
    main()
