"""DLRM in PyTorch, trained on the parameter servers.

The model of configs/ctr_dlrm_*.pbtxt: a bottom MLP over the 13 dense
features, a 16-dim embedding bag per categorical field (one table on the
shards), the dot products of every pair of the 27 vectors, and a top MLP.

    python3 ctr_dlrm.py --print_model_spec   # the job spec's model block
    PS_COORDINATOR_FILE=... PS_TOKEN_FILE=... python3 ctr_dlrm.py  # a worker
"""

import torch

import ctr_common
import ps.torch

FIELDS = len(ctr_common.FIELDS)


class DLRM(torch.nn.Module):
    def __init__(self, dim=16, top=(32,)):
        """`top`: the widths of the top MLP's hidden layers."""
        super().__init__()
        self.bottom = torch.nn.Sequential(torch.nn.Linear(13, dim), torch.nn.ReLU())
        self.emb = ps.torch.EmbeddingBag("embeddings", dim)
        pairs = (FIELDS + 1) * FIELDS // 2
        layers, width = [], pairs + dim
        for w in top:
            layers += [torch.nn.Linear(width, w), torch.nn.ReLU()]
            width = w
        self.top = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
        self.pairs = torch.triu_indices(FIELDS + 1, FIELDS + 1, offset=1)

    def forward(self, keys, offsets, dense):
        b = dense.shape[0]
        x = self.bottom(dense)
        e = self.emb(keys, offsets).view(FIELDS, b, -1).transpose(0, 1)
        v = torch.cat([x.unsqueeze(1), e], 1)  # [b, 27, dim]
        dots = torch.bmm(v, v.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([dots, x], 1)).squeeze(1)


if __name__ == "__main__":
    ctr_common.main(DLRM(), __doc__)
