"""Exactness: one Python worker under BSP against plain PyTorch from the
same initial values, 200 steps, equal to 1e-5: embedding bags with SGD,
Adagrad and lazy Adam (torch.optim.SparseAdam), and a dense MLP with SGD
and Adam, the optimizers running on the shards. The Adagrad and lazy Adam
bags prefetch each next batch's rows with the step's end (no pull after
the first step): the rows they get are the updated ones."""

import copy

import numpy as np
import pytest
import torch

import ps
import ps.torch

STEPS = 200
KEYS = 40
DIM = 8
BAGS = 16
TOL = 1e-5


def table_spec(name, optimizer):
    return f"""
name: "{name}"
python {{}}
model {{ sparse_tables {{ name: "items" dim: {DIM} optimizer {{ {optimizer} }} }} }}
optimizer {{ kind: SGD learning_rate: 0.1 }}
consistency {{ model: BSP }}
data {{ batch_size: {BAGS} max_steps: {STEPS} }}
num_workers: 1
"""


def bag_batch(clock, every_key):
    """Bags of keys (every key in every batch when `every_key`), their
    offsets and targets."""
    rng = np.random.default_rng(1000 + clock)
    if every_key:
        keys = np.concatenate([rng.permutation(KEYS), rng.integers(0, KEYS, 24)])
        rng.shuffle(keys)
    else:
        keys = rng.integers(0, KEYS, 48)
    cuts = np.sort(rng.choice(np.arange(1, len(keys)), BAGS - 1, replace=False))
    offsets = np.concatenate([[0], cuts])
    y = rng.normal(size=BAGS).astype(np.float32)
    return torch.from_numpy(keys), torch.from_numpy(offsets), torch.from_numpy(y)


W_OUT = torch.from_numpy(np.random.default_rng(7).normal(size=DIM).astype(np.float32))


def bag_loss(pooled, y):
    return ((pooled @ W_OUT - y) ** 2).mean()


def run_job(cluster, spec, train):
    job_id = cluster.submit(spec)
    job = cluster.worker.wait_for_job(timeout_s=60)
    assert job is not None, cluster.logs()
    assert job.id == job_id
    result = train(job)
    assert cluster.wait_state(job_id) == "SUCCEEDED", cluster.logs()
    return result


@pytest.mark.parametrize(
    "name,optimizer,mode,every_key,prefetch,reference",
    [
        ("sgd", "kind: SGD learning_rate: 0.05", "sum", False, False,
         lambda p: torch.optim.SGD(p, lr=0.05)),
        ("adagrad", "kind: ADAGRAD learning_rate: 0.1 epsilon: 1e-10 initial_accumulator: 0.1", "mean", False,
         True, lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-10, initial_accumulator_value=0.1)),
        # SparseAdam counts steps per tensor, the shards per row (lazy
        # Adam): the same when every row is in every step's batch.
        ("lazy-adam", "kind: ADAM learning_rate: 0.01", "sum", True, True,
         lambda p: torch.optim.SparseAdam(p, lr=0.01)),
    ],
)
def test_embedding_bag_matches_torch(cluster, name, optimizer, mode, every_key, prefetch, reference):
    all_keys = np.arange(KEYS)

    def train(job):
        bag = ps.torch.EmbeddingBag("items", DIM, mode=mode)
        trainer = ps.torch.Trainer(job, bag)
        initial = trainer.session.pull_rows("items", all_keys)
        steps = []
        for step in trainer.steps():
            keys, offsets, y = bag_batch(step.clock, every_key)
            if prefetch and step.next_batch is not None:
                bag.prefetch(bag_batch(step.clock + 1, every_key)[0])
            loss = bag_loss(bag(keys, offsets), y)
            loss.backward()
            step.loss = loss
            steps.append(step)
        final = trainer.session.pull_rows("items", all_keys)
        trainer.finish()
        if prefetch:  # every step's rows but the first came with an end
            assert [s.clock for s in steps if s.times[0] > 0] == [0]
        else:
            assert all(s.times[0] > 0 for s in steps)
        return initial, final

    initial, final = run_job(cluster, table_spec(f"py-bag-{name}", optimizer), train)

    ref = torch.nn.EmbeddingBag(KEYS, DIM, mode=mode, sparse=name == "lazy-adam")
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(initial))
    opt = reference(ref.parameters())
    for clock in range(STEPS):
        keys, offsets, y = bag_batch(clock, every_key)
        opt.zero_grad()
        bag_loss(ref(keys, offsets), y).backward()
        opt.step()
    expected = ref.weight.detach().numpy()
    assert np.abs(final - initial).max() > 0.01  # it trained
    np.testing.assert_allclose(final, expected, rtol=0, atol=TOL)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
    )


def mlp_batch(clock):
    rng = np.random.default_rng(5000 + clock)
    x = rng.normal(size=(32, 10)).astype(np.float32)
    y = (x[:, :3].sum(axis=1, keepdims=True) > 0).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


@pytest.mark.parametrize(
    "name,optimizer,reference",
    [
        ("sgd", "kind: SGD learning_rate: 0.05", lambda p: torch.optim.SGD(p, lr=0.05)),
        ("adam", "kind: ADAM learning_rate: 0.01", lambda p: torch.optim.Adam(p, lr=0.01)),
    ],
)
def test_dense_mlp_matches_torch(cluster, name, optimizer, reference):
    model = mlp()
    spec = f"""
name: "py-mlp-{name}"
python {{}}
{ps.torch.model_spec(model)}
optimizer {{ {optimizer} }}
consistency {{ model: BSP }}
data {{ batch_size: 32 max_steps: {STEPS} }}
num_workers: 1
"""
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def train(job):
        trainer = ps.torch.Trainer(job, model)
        trainer.session.pull_weights()  # the shards' initial weights
        initial = copy.deepcopy(model)
        for step in trainer.steps():
            x, y = mlp_batch(step.clock)
            loss = loss_fn(model(x), y)
            loss.backward()
            step.loss = loss
        trainer.finish()
        return initial

    ref = run_job(cluster, spec, train)
    start = [p.detach().clone() for p in ref.parameters()]
    opt = reference(ref.parameters())
    for clock in range(STEPS):
        x, y = mlp_batch(clock)
        opt.zero_grad()
        loss_fn(ref(x), y).backward()
        opt.step()
    for (n, got), want, before in zip(model.named_parameters(), ref.parameters(), start):
        assert (want - before).abs().max() > 0.01, n  # it trained
        np.testing.assert_allclose(
            got.detach().numpy(), want.detach().numpy(), rtol=0, atol=TOL, err_msg=n
        )
