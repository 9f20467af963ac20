"""A factorization machine in PyTorch, trained on the parameter servers.

The model of configs/ctr_fm_*.pbtxt (8-dim factors of the 26 categorical
fields and of the projected dense features, first-order weights, a logit
layer) written as a torch module: the factor and weight tables live on the
shards (ps.torch.EmbeddingBag), the dense layers too (ps.torch.Trainer).

    python3 ctr_fm.py --print_model_spec   # the job spec's model block
    PS_COORDINATOR_FILE=... PS_TOKEN_FILE=... python3 ctr_fm.py  # a worker
"""

import torch

import ctr_common
import ps.torch

FIELDS = len(ctr_common.FIELDS)


class FM(torch.nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.dense_v = torch.nn.Linear(13, dim)
        self.v = ps.torch.EmbeddingBag("fm_v", dim, spec="init { kind: NORMAL scale: 0.01 }")
        self.w = ps.torch.EmbeddingBag("fm_w", 1)
        self.logit = torch.nn.Linear(1 + FIELDS + 13, 1)

    def forward(self, keys, offsets, dense):
        b = dense.shape[0]
        v = self.v(keys, offsets).view(FIELDS, b, -1).transpose(0, 1)
        v = torch.cat([self.dense_v(dense).unsqueeze(1), v], 1)  # [b, 27, dim]
        fm2 = 0.5 * (v.sum(1) ** 2 - (v**2).sum(1)).sum(1, keepdim=True)
        w = self.w(keys, offsets).view(FIELDS, b).t()
        return self.logit(torch.cat([fm2, w, dense], 1)).squeeze(1)


if __name__ == "__main__":
    ctr_common.main(FM(), __doc__)
