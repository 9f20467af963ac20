"""What the click-log examples share: the batch as model inputs, the test
metrics, and the worker's loop (ctr_fm.py, ctr_dlrm.py)."""

import argparse

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


def evaluate(model, data):
    scores, labels = [], []
    with torch.no_grad():
        for b in data.test_batches(batch_size=4096):
            scores.append(torch.sigmoid(model(*inputs(b))).numpy())
            labels.append(b["labels"])
    s, y = np.concatenate(scores), np.concatenate(labels)
    p = np.clip(s, 1e-7, 1 - 1e-7)
    logloss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return {"test_auc": auc(s, y), "test_logloss": float(logloss)}


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
        for step in trainer.steps():
            batch = data.batch(step)
            loss = loss_fn(model(*inputs(batch)), torch.from_numpy(batch["labels"]))
            loss.backward()
            step.loss = loss
        trainer.finish(evaluate=lambda: evaluate(model, data))
