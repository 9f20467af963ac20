"""Dense gradients sent from backward (ps.torch.Trainer's
push_in_backward): the same weights as sending them at the step's end, each
tensor sent once per step as backward produces it, and what it cannot send
(a second backward, a .grad changed after backward, a NaN) refused."""

import numpy as np
import pytest
import torch

import ps
import ps.torch

STEPS = 40


def mlp():
    # 64 x 512 floats: 128 KB, over the client's 64 KB message threshold, so
    # the first layer's gradient leaves before the step ends.
    torch.manual_seed(3)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)
    )


def batch(clock):
    rng = np.random.default_rng(9000 + clock)
    x = rng.normal(size=(32, 64)).astype(np.float32)
    y = (x[:, :5].sum(axis=1, keepdims=True) > 0).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def spec(name, model, steps=STEPS):
    return f"""
name: "{name}"
python {{}}
{ps.torch.model_spec(model)}
optimizer {{ kind: ADAM learning_rate: 0.01 }}
consistency {{ model: BSP }}
data {{ batch_size: 32 max_steps: {steps} }}
num_workers: 1
seed: 11
"""


class Spy:
    """The session's Access, recording which dense tensors each push and
    end of step carries."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def push(self, clock, base_version, dense, rows):
        self.calls.append(("push", clock, [i for i, _, _ in dense]))
        return self.inner.push(clock, base_version, dense, rows)

    def end_step(self, clock, base_version, dense, rows, next_rows, next_weights):
        self.calls.append(("end", clock, [i for i, _, _ in dense]))
        return self.inner.end_step(
            clock, base_version, dense, rows, next_rows, next_weights
        )


def start(cluster, name, model, steps=STEPS):
    job_id = cluster.submit(spec(name, model, steps))
    job = cluster.worker.wait_for_job(timeout_s=60)
    assert job is not None and job.id == job_id, cluster.logs()
    return job_id, job


def train(cluster, push_in_backward):
    model = mlp()
    loss_fn = torch.nn.BCEWithLogitsLoss()
    job_id, job = start(cluster, f"py-overlap-{push_in_backward}", model)
    trainer = ps.torch.Trainer(job, model, push_in_backward=push_in_backward)
    spy = trainer.session.access = Spy(trainer.session.access)
    trainer.session.pull_weights()
    initial = [p.detach().clone() for p in model.parameters()]
    for step in trainer.steps():
        x, y = batch(step.clock)
        loss = loss_fn(model(x), y)
        loss.backward()
        step.loss = loss
    trainer.finish()
    assert cluster.wait_state(job_id) == "SUCCEEDED", cluster.logs()
    return initial, [p.detach().clone() for p in model.parameters()], spy.calls


def test_sent_from_backward_equals_sent_at_the_end(cluster):
    initial, overlapped, calls = train(cluster, push_in_backward=True)
    initial_end, at_end, calls_end = train(cluster, push_in_backward=False)
    for a, b in zip(initial, initial_end):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b, before in zip(overlapped, at_end, initial):
        assert (a - before).abs().max() > 0.01  # it trained
        torch.testing.assert_close(a, b, rtol=0, atol=0)

    # From backward: every tensor once per step, the last layer's first (as
    # backward produces them), none with the end of step.
    for clock in range(STEPS):
        pushed = [c[2] for c in calls if c[:2] == ("push", clock)]
        assert sorted(sum(pushed, [])) == [0, 1, 2, 3], (clock, pushed)
        assert pushed[0][0] in (2, 3), pushed
        assert [c[2] for c in calls if c[:2] == ("end", clock)] == [[]]
    # At the end: all of them with the end of step.
    assert not [c for c in calls_end if c[0] == "push"]
    assert all(c[2] == [0, 1, 2, 3] for c in calls_end if c[0] == "end")


@pytest.mark.parametrize(
    "name,misuse,message",
    [
        ("twice", "second backward", "a second backward reached tensor"),
        ("clipped", "clip", "changed after backward sent it"),
        # A NaN from the loss reaches the last layer first: nothing sent.
        ("nan", "NaN", "tensor 3 .'2.bias'. holds NaN or Inf; nothing was sent"),
    ],
)
def test_what_push_in_backward_cannot_send_is_refused(cluster, name, misuse, message):
    model = mlp()
    job_id, job = start(cluster, f"py-overlap-{name}", model, steps=5)
    trainer = ps.torch.Trainer(job, model)
    with pytest.raises(ps.InvalidArgument, match=message):
        for step in trainer.steps():
            x, y = batch(step.clock)
            (model(x).sum() * (np.nan if misuse == "NaN" else 1)).backward()
            if misuse == "second backward":
                model(x).sum().backward()  # gradient accumulation
            elif misuse == "clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    trainer.session.close()
    job.fail(f"the test's {misuse}")
    assert cluster.wait_state(job_id) == "FAILED"


BAG_MODEL = """
import numpy as np, torch, ps, ps.torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = ps.torch.EmbeddingBag("items", 8)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(8, 512), torch.nn.ReLU(),
                                       torch.nn.Linear(512, 1))
    def forward(self, keys, offsets):
        return self.mlp(self.bag(keys, offsets))
model = Model()
"""


def test_a_nan_from_backward_fails_the_job_and_the_process_exits():
    """A worker script whose first layer's gradient turns NaN (the layers
    above it sent already): the job fails with the reason and the process
    ends. (The error is raised after backward: one raised inside it can
    leave the rest of the graph in torch 1.13's queue, and the process
    hanging at exit; ps.torch.Trainer._on_grad.)"""
    import os
    import subprocess
    import sys

    from conftest import HERE, Cluster

    namespace = {}
    exec(BAG_MODEL, namespace)
    cluster = Cluster(servers=1, join=False)
    try:
        script = BAG_MODEL + (
            "model.mlp[0].weight.register_hook(lambda g: g * float('nan'))\n"
            "with ps.Worker() as worker, worker.wait_for_job() as job:\n"
            "    trainer = ps.torch.Trainer(job, model)\n"
            "    for step in trainer.steps():\n"
            "        keys = torch.from_numpy(np.arange(64) % 10)\n"
            "        offsets = torch.from_numpy(np.arange(32) * 2)\n"
            "        model(keys, offsets).sum().backward()\n"
        )
        env = dict(cluster.env, PYTHONPATH=os.path.dirname(HERE))
        w = subprocess.Popen([sys.executable, "-c", script], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            job_id = cluster.submit(spec("py-overlap-nan-exit", namespace["model"], steps=5))
            assert cluster.wait_state(job_id, timeout_s=30) == "FAILED", cluster.logs()
            out = w.communicate(timeout=30)[0]  # it exits
        finally:
            if w.poll() is None:
                w.kill()
        assert w.returncode != 0, out
        events = cluster.psctl("events", job_id).stdout
        assert "tensor 0 ('mlp.0.weight') holds NaN or Inf; this one was not sent" in events, events
    finally:
        cluster.down()
