"""Matrix factorization in PyTorch on the parameter servers (docs/python.md)."""
import torch

import ps
import ps.torch


class MF(torch.nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        # Tables on the shards; the batches' offsets have size + 1 entries.
        self.users = ps.torch.EmbeddingBag("users", dim, include_last_offset=True)
        self.items = ps.torch.EmbeddingBag("items", dim, include_last_offset=True)
        self.bias = torch.nn.Parameter(torch.zeros(1))  # dense: on the shards too

    def forward(self, batch):
        u, u_offsets, _ = batch["sparse"]["user"]
        i, i_offsets, _ = batch["sparse"]["item"]
        p = self.users(torch.from_numpy(u.view("int64")), torch.from_numpy(u_offsets))
        q = self.items(torch.from_numpy(i.view("int64")), torch.from_numpy(i_offsets))
        return (p * q).sum(1) + self.bias


model = MF()
# PS_COORDINATOR_FILE, PS_TOKEN_FILE; an exception fails the job with it.
with ps.Worker() as worker, worker.wait_for_job() as job:
    data = ps.Data(job)  # the job's files, batch by batch as its data plan says
    trainer = ps.torch.Trainer(job, model, steps_per_epoch=data.steps_per_epoch)
    for step in trainer.steps():
        batch = data.batch(step)
        loss = ((model(batch) - torch.from_numpy(batch["labels"])) ** 2).mean()
        loss.backward()  # the gradients go to the shards
        step.loss = loss

    def rmse():
        with torch.no_grad():
            se = sum(float(((model(b) - torch.from_numpy(b["labels"])) ** 2).sum())
                     for b in data.test_batches())
        return {"test_rmse": (se / sum(b["size"] for b in data.test_batches())) ** 0.5}

    trainer.finish(evaluate=rmse)  # the final model's RMSE, if asked for it
