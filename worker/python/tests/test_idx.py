"""An MLP in PyTorch on Fashion-MNIST (IDX, data.path) through ps.Data:
one Python worker, BSP, 300 steps; the final model's test accuracy,
reported through finish(evaluate=...), reaches 0.75 (ps_worker's MLP
config reaches 0.80+ in its first epoch)."""

import re

import numpy as np
import torch

import ps
import ps.torch

DATA = "/usr/share/datasets/fashion-mnist"


def test_fashion_mnist_mlp(cluster):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    )
    spec = f"""
name: "py-fmnist"
python {{}}
{ps.torch.model_spec(model)}
optimizer {{ kind: MOMENTUM learning_rate: 0.05 momentum: 0.9 }}
consistency {{ model: BSP }}
data {{ path: "{DATA}" batch_size: 64 max_steps: 300 }}
num_workers: 1
"""
    job_id = cluster.submit(spec)
    job = cluster.worker.wait_for_job(timeout_s=60)
    assert job is not None and job.id == job_id
    data = ps.Data(job)
    assert data.steps_per_epoch == 60000 // 64
    trainer = ps.torch.Trainer(job, model, steps_per_epoch=data.steps_per_epoch)
    loss_fn = torch.nn.CrossEntropyLoss()
    seen = set()
    for step in trainer.steps():
        batch = data.batch(step)
        assert batch["dense"].shape == (64, 784) and batch["labels"].dtype == np.int32
        seen.add(batch["labels"][:8].tobytes())
        loss = loss_fn(model(torch.from_numpy(batch["dense"])),
                       torch.from_numpy(batch["labels"]).long())
        loss.backward()
        step.loss = loss
    assert len(seen) > 250  # different batches, not one repeated

    def accuracy():
        right = total = 0
        with torch.no_grad():
            for b in data.test_batches(batch_size=1000, max_examples=5000):
                pred = model(torch.from_numpy(b["dense"])).argmax(1).numpy()
                right += int((pred == b["labels"]).sum())
                total += b["size"]
        return {"test_accuracy": right / total}

    trainer.finish(evaluate=accuracy)
    assert cluster.wait_state(job_id) == "SUCCEEDED"
    status = cluster.psctl("status", job_id).stdout
    m = re.search(r"test accuracy\s+([0-9.]+)", status)
    assert m and float(m.group(1)) > 0.75, status
