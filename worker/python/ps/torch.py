"""ps.torch: a PyTorch module's parameters held on the shards.

    # model holds ps.torch.EmbeddingBag("items", 16) over a sparse table
    trainer = ps.torch.Trainer(job, model)
    for step in trainer.steps():
        keys, offsets, x, y = batch_for(step.batch)
        loss = loss_fn(model(keys, offsets, x), y)
        loss.backward()
        step.loss = loss

The module computes in torch as usual; its parameters are views of the
session's weight arrays, so each step's weights arrive in them in place,
and their gradients go to the shards as backward produces them, where the
job's optimizer applies them. An EmbeddingBag pulls the rows of its batch's
unique keys and, in backward, pushes one summed gradient row per key. The
native module does not link libtorch: tensors cross as numpy views.
"""

import functools

import numpy as np
import torch
import torch.nn.functional as F

from ps._loader import native as _native
from ps.session import Session


def _ordered_parameters(job, module):
    """The module's parameters in the job's tensor order: by name where the
    job's tensors are named after them (model_spec's names), else in the
    module's order; shapes must match element for element."""
    named = dict(module.named_parameters())
    names = [n for n, _ in job.tensors]
    if all(n in named for n in names):
        params = [named[n] for n in names]
    else:
        params = list(module.parameters())
    if len(params) != len(job.tensors):
        raise _native.InvalidArgument(
            f"the module has {len(params)} parameters "
            f"{list(named)}, the job has {len(job.tensors)} dense tensors "
            f"{names}"
        )
    for p, (name, shape) in zip(params, job.tensors):
        if list(p.shape) != list(shape) and p.numel() != int(np.prod(shape)):
            raise _native.InvalidArgument(
                f"tensor '{name}': the job has shape {list(shape)}, the "
                f"module's parameter has {list(p.shape)}"
            )
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise _native.InvalidArgument(
                f"tensor '{name}': parameters must be float32 on the CPU, "
                f"got {p.dtype} on {p.device}"
            )
        if not p.is_contiguous():
            raise _native.InvalidArgument(f"tensor '{name}': not contiguous")
    return params


class Trainer:
    """Steps of a torch module whose dense parameters live on the shards.

    With `push_in_backward` (the default) each parameter's gradient leaves
    as soon as backward has produced it (a hook on the parameter), while
    backward computes the layers below, as ps_worker's own pushes do; the
    client gathers small ones into one message. The gradient sent is the
    one backward produced, so a step runs one backward and leaves .grad
    (a copy) as backward made it: a second backward in the step, or a
    .grad clipped or scaled after backward, raises ps.InvalidArgument when
    the loop body returns (so does a NaN gradient, whose tensor and those
    after it are not sent). With push_in_backward=False each .grad goes as
    it is when the loop body returns. Either way the shards get the same
    numbers.
    """

    def __init__(
        self,
        job,
        module=None,
        steps_per_epoch=None,
        report_every_steps=20,
        push_in_backward=True,
    ):
        self.job = job
        self.module = module
        self.params = [] if module is None else _ordered_parameters(job, module)
        arrays = [p.detach().numpy() for p in self.params]
        self.session = Session(
            job,
            arrays,
            steps_per_epoch=steps_per_epoch,
            report_every_steps=report_every_steps,
        )
        self.step = None
        self.push_in_backward = push_in_backward
        # This step's gradients sent from backward, by tensor index: the
        # tensors backward produced (held, so that torch gives .grad a
        # copy of each instead of the buffer on its way).
        self._sent = {}
        self._error = None  # what stopped the sending from backward
        self._hooks = []
        if push_in_backward:
            for i, p in enumerate(self.params):
                self._hooks.append(p.register_hook(functools.partial(self._on_grad, i)))
        if module is not None:
            for m in module.modules():
                if isinstance(m, EmbeddingBag):
                    m._attach(self)

    def _on_grad(self, index, grad):
        """Backward produced parameter `index`'s gradient: sent at once.
        An error stops the sending and is raised when the step's body
        returns, not here: torch 1.13 leaves the rest of a graph whose hook
        raised in its thread's queue, and a process that exits holding it
        hangs (its tensors' numpy buffers are freed after Python is gone)."""
        step = self.step
        if step is None or self._error is not None:  # outside the steps
            return
        try:
            if index in self._sent:
                raise _native.InvalidArgument(
                    f"step {step.clock}: a second backward reached tensor "
                    f"'{self.job.tensors[index][0]}', whose gradient the "
                    "first sent already; to accumulate gradients over several "
                    "backward passes make the Trainer with "
                    "push_in_backward=False"
                )
            step.push_dense(index, grad.detach().contiguous().numpy(), now=True)
            self._sent[index] = grad
        except Exception as e:  # noqa: BLE001 (raised by steps())
            self._error = e

    def steps(self, evaluate=None):
        """Yields a ps.Step per clock of the worker's plan; when the body
        returns, the parameters' gradients not sent from backward (and the
        embedding bags' row gradients) end the step and the next weights
        arrive. `evaluate`: called every data.eval_every_steps on the job's
        evaluator worker, its test_* values reported (ps.Session.steps)."""
        with torch.no_grad():
            for p in self.params:
                p.grad = None
        for step in self.session.steps(evaluate):
            self.step = step
            self._sent, self._error = {}, None
            yield step
            self.step = None
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            for i, p in enumerate(self.params):
                if p.grad is None:
                    continue
                sent = self._sent.get(i)
                if sent is None:  # not through backward (set by hand)
                    step.push_dense(i, p.grad.detach().contiguous().numpy())
                elif not torch.allclose(p.grad, sent, rtol=0, atol=0, equal_nan=True):
                    raise _native.InvalidArgument(
                        f"step {step.clock}: the gradient of tensor "
                        f"'{self.job.tensors[i][0]}' changed after backward "
                        "sent it (clipped or scaled .grad?); make the "
                        "Trainer with push_in_backward=False to send .grad "
                        "as it is when the step's body returns"
                    )
            self._sent = {}
            if isinstance(step.loss, torch.Tensor):
                step.loss = float(step.loss.detach())
            for p in self.params:
                p.grad = None

    def finish(self, evaluate=None):
        """Pulls the final weights into the module and ends this worker's
        share (ps.Session.finish)."""
        for h in self._hooks:  # the module may train elsewhere after it
            h.remove()
        self._hooks = []
        self.session.finish(evaluate)


class _Rows(torch.autograd.Function):
    """Identity on pulled rows whose backward pushes their gradient."""

    @staticmethod
    def forward(ctx, rows, step, table, keys):
        ctx.step, ctx.table, ctx.keys = step, table, keys
        return rows.view_as(rows)

    @staticmethod
    def backward(ctx, grad):
        if grad.is_sparse:  # a row per key occurrence: summed per key here
            summed = np.zeros((len(ctx.keys), grad.shape[1]), dtype=np.float32)
            _native.scatter_add_rows(
                grad._indices()[0].contiguous().numpy(),
                grad._values().detach().contiguous().numpy(),
                summed,
            )
            ctx.step.push_rows(ctx.table, ctx.keys, summed)
        else:
            ctx.step.push_rows(ctx.table, ctx.keys, grad.detach().contiguous().numpy())
        return None, None, None, None


def _unique(keys):
    """(the distinct keys in order of first appearance as a numpy array,
    each key's index among them as an int64 tensor): a hash map in the
    native module, several times faster than torch.unique's sort."""
    k = keys.detach().numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
    if k.dtype not in (np.int64, np.uint64):
        if not np.issubdtype(k.dtype, np.integer):
            raise _native.InvalidArgument(f"keys: expected integers, got dtype {k.dtype}")
        k = k.astype(np.int64)
    k = np.ascontiguousarray(k.reshape(-1))
    unique = np.empty(len(k), dtype=k.dtype)
    inverse = np.empty(len(k), dtype=np.int64)
    n = _native.unique_keys(k, unique, inverse)
    return unique[:n], torch.from_numpy(inverse)


class EmbeddingBag(torch.nn.Module):
    """torch.nn.EmbeddingBag over sparse table `table` (rows of `dim`
    floats) of the job: forward pulls the rows of the batch's unique keys,
    backward pushes their summed gradients; the table's optimizer runs on
    the shards. A Trainer over a module holding it connects it to the job
    (and checks the table's dim); model_spec lists its table. prefetch()
    with the next batch's keys makes their rows come back with the step's
    end, so that the next forward pulls nothing."""

    def __init__(self, table, dim, mode="sum", include_last_offset=False, spec=""):
        """`mode` and `include_last_offset` as torch.nn.EmbeddingBag's
        (True takes ps.Data's offsets, [size + 1], as they are); `spec`:
        more of the table's spec for model_spec, e.g.
        'init { kind: NORMAL scale: 0.01 }'."""
        super().__init__()
        if mode not in ("sum", "mean"):
            raise ValueError(f"EmbeddingBag mode: 'sum' or 'mean', got {mode!r}")
        self.table = table
        self.dim = int(dim)
        self.mode = mode
        self.include_last_offset = include_last_offset
        self.spec = spec
        self._trainer = None
        self._index = None

    def _attach(self, trainer):
        index, dim = trainer.session._table(self.table)
        if dim != self.dim:
            raise _native.InvalidArgument(
                f"EmbeddingBag over '{self.table}': dim {self.dim}, the job's "
                f"table has dim {dim}"
            )
        self._trainer, self._index = trainer, index

    def _connected(self):
        if self._trainer is None:
            raise RuntimeError(
                f"ps.torch.EmbeddingBag('{self.table}'): not connected to a "
                "job; make a ps.torch.Trainer over its module first"
            )
        return self._trainer

    def prefetch(self, keys):
        """Asks for the rows of `keys`, the next step's keys of this bag
        (e.g. of the batch at step.next_batch), to come back with this
        step's end, as ps_worker's next batch's rows ride on its pushes:
        the next forward over the same keys then pulls nothing (over other
        keys it pulls as usual). Call it in the step's body; outside a
        step it does nothing."""
        step = self._connected().step
        if step is not None:
            step.prefetch_rows(self._index, _unique(keys)[0])

    def forward(self, keys, offsets=None, per_sample_weights=None):
        trainer = self._connected()
        unique_np, inverse = _unique(keys)
        step = trainer.step
        if step is None:  # outside a step (evaluation): no gradient
            rows = torch.from_numpy(trainer.session.pull_rows(self._index, unique_np))
        else:
            rows = torch.from_numpy(step.pull_rows(self._index, unique_np))
            rows.requires_grad_(True)
            rows = _Rows.apply(rows, step, self._index, unique_np)
        if offsets is not None:
            offsets = torch.as_tensor(offsets, dtype=torch.int64)
        # sparse: the rows' gradient comes as one row per key occurrence,
        # summed per key by _Rows (torch's dense backward sorts the keys).
        return F.embedding_bag(
            inverse,
            rows,
            offsets,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset,
            sparse=step is not None,
        )


def prefetch(module, keys):
    """EmbeddingBag.prefetch(keys) on every ps.torch.EmbeddingBag of
    `module`: for models whose bags all take the same keys (the FM and the
    DLRM of examples/python/)."""
    for m in module.modules():
        if isinstance(m, EmbeddingBag):
            m.prefetch(keys)


def model_spec(module, tables=()):
    """The `model { ... }` text of a job spec for `module`: its parameters
    (named after them, with torch's default initialisation of Linear and
    similar layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in))), the sparse tables
    of its ps.torch.EmbeddingBag modules, and `tables`, more (name, dim)
    pairs or full `sparse_tables { ... }` texts."""
    lines = ["model {"]
    for name, p in module.named_parameters():
        shape = list(p.shape)
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else None
        owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
        if fan_in is None and hasattr(owner, "weight") and owner.weight.dim() > 1:
            fan_in = int(np.prod(list(owner.weight.shape)[1:]))
        scale = 1.0 / np.sqrt(fan_in) if fan_in else 0.0
        init = f"init {{ kind: UNIFORM scale: {scale:.9g} }}" if scale else "init { kind: ZEROS }"
        lines.append(f'  tensors {{ name: "{name}" shape: {shape} {init} }}')
    seen = set()
    for m in module.modules():
        if isinstance(m, EmbeddingBag) and m.table not in seen:
            seen.add(m.table)
            extra = f" {m.spec.strip()}" if m.spec.strip() else ""
            lines.append(f'  sparse_tables {{ name: "{m.table}" dim: {m.dim}{extra} }}')
    for t in tables:
        if isinstance(t, str):
            lines.append("  " + t.strip())
        else:
            lines.append(f'  sparse_tables {{ name: "{t[0]}" dim: {int(t[1])} }}')
    lines.append("}")
    return "\n".join(lines) + "\n"
