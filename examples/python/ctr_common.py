"""What the click-log examples share: the batch as model inputs, the test
metrics, and the worker's loop (ctr_fm.py, ctr_dlrm.py); and the same
models without the parameter servers, for single-process baselines
(local_model, read_log)."""

import argparse
import math
import re

import numpy as np
import torch

import ps
import ps.torch

FIELDS = [f"C{i}" for i in range(1, 27)]


def inputs(batch):
    """All 26 fields' bags as one bag list (field-major) and the dense part."""
    keys, offsets, base = [], [], 0
    for f in FIELDS:
        k, o, _ = batch["sparse"][f]
        keys.append(k.view(np.int64))
        offsets.append(o[:-1] + base)
        base += len(k)
    return (
        torch.from_numpy(np.concatenate(keys)),
        torch.from_numpy(np.concatenate(offsets)),
        torch.from_numpy(batch["dense"]),
    )


def auc(scores, labels):
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def evaluate(model, data, max_examples=0):
    """Test AUC and logloss over the test data (its first `max_examples`
    lines; 0: all)."""
    scores, labels = [], []
    with torch.no_grad():
        for b in data.test_batches(batch_size=4096, max_examples=max_examples):
            scores.append(torch.sigmoid(model(*inputs(b))).numpy())
            labels.append(b["labels"])
    s, y = np.concatenate(scores), np.concatenate(labels)
    p = np.clip(s, 1e-7, 1 - 1e-7)
    logloss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return {"test_auc": auc(s, y), "test_logloss": float(logloss)}


class LocalBag(torch.nn.Module):
    """torch.nn.EmbeddingBag (sparse gradients) in place of a
    ps.torch.EmbeddingBag: `rows` rows initialised as the shards initialise
    the table's (its spec's NORMAL scale, else U(-1/sqrt(dim),
    1/sqrt(dim))), indexed by key number (read_log's)."""

    def __init__(self, rows, bag):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(rows, bag.dim, mode=bag.mode, sparse=True)
        normal = re.search(r"kind: NORMAL scale: ([0-9.e-]+)", bag.spec)
        with torch.no_grad():
            if normal:
                self.bag.weight.normal_(0, float(normal.group(1)))
            else:
                bound = 1 / math.sqrt(bag.dim)
                self.bag.weight.uniform_(-bound, bound)

    def forward(self, keys, offsets=None, per_sample_weights=None):
        return self.bag(keys, offsets, per_sample_weights=per_sample_weights)


def local_model(model, rows):
    """`model` with each ps.torch.EmbeddingBag child replaced by a LocalBag
    of `rows` rows: the same module trained in one process by plain PyTorch
    (torch.optim for the dense parameters, SparseAdam or the like for the
    bags'). Returns (model, the bags' parameters)."""
    tables = []
    for name, m in list(model.named_children()):
        if isinstance(m, ps.torch.EmbeddingBag):
            setattr(model, name, LocalBag(rows, m))
            tables += list(getattr(model, name).parameters())
    return model, tables


def read_log(path, vocab):
    """A Criteo TSV file as (ids [n, 26] key numbers, dense [n, 13], labels
    [n]) for local_model: each (field, id) a key numbered in `vocab`, which
    grows; dense features log(1 + max(x, 0)) and each field's missing id a
    key of its own, as ps_worker reads them."""
    labels, dense, ids = [], [], []
    with open(path, encoding="ascii") as f:
        for line in f:
            c = line.rstrip("\n").split("\t")
            labels.append(float(c[0]))
            dense.append([math.log1p(max(float(x), 0.0)) if x else 0.0 for x in c[1:14]])
            ids.append([vocab.setdefault((i, x), len(vocab)) for i, x in enumerate(c[14:40])])
    return (np.asarray(ids, dtype=np.int64), np.asarray(dense, dtype=np.float32),
            np.asarray(labels, dtype=np.float32))


def local_batch(log, lo, hi):
    """Lines [lo, hi) of a read_log result as model inputs (keys
    field-major, one per bag) and labels."""
    ids, x, y = log
    keys = torch.from_numpy(np.ascontiguousarray(ids[lo:hi].T).reshape(-1))
    return keys, torch.arange(len(keys)), torch.from_numpy(x[lo:hi]), torch.from_numpy(y[lo:hi])


def main(model, doc):
    """--print_model_spec prints the job spec's model block; otherwise this
    process joins the cluster (PS_COORDINATOR_FILE, PS_TOKEN_FILE) as a
    worker and trains `model` on the job's click log."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--print_model_spec", action="store_true")
    args = ap.parse_args()
    if args.print_model_spec:
        print(ps.torch.model_spec(model), end="")
        return
    torch.set_num_threads(1)
    with ps.Worker() as worker, worker.wait_for_job() as job:
        data = ps.Data(job)
        trainer = ps.torch.Trainer(job, model, steps_per_epoch=data.steps_per_epoch)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        # Every data.eval_every_steps on the evaluator, as ps_worker's.
        periodic = lambda: evaluate(model, data, job.assignment.eval_examples)  # noqa: E731
        for step in trainer.steps(evaluate=periodic):
            batch = data.batch(step)
            if step.next_batch is not None:  # its rows come with this step's end
                ps.torch.prefetch(model, inputs(data.batch(step.next_batch))[0])
            loss = loss_fn(model(*inputs(batch)), torch.from_numpy(batch["labels"]))
            loss.backward()
            step.loss = loss
        trainer.finish(evaluate=lambda: evaluate(model, data))
