"""ps.read_checkpoint: a job's checkpoint as numpy arrays, for evaluation or
serving without a cluster.

    ckpt = ps.read_checkpoint("/data/server-0/job-3", "/data/server-1/job-3")
    ckpt["version"], ckpt["tensors"]["fc1.weight"], ckpt["tables"]["items"]

Each shard writes its files under its --data_dir, in <data_dir>/<job_id>/
(docs/faults.md); give every shard's directory (or the files). The newest
version for which every shard's file is there is read: dense tensors in
their spec shapes, each table as (keys uint64, rows [n, dim] float32),
rows of all shards together; with the job id, version and spec.
"""

import os
import re

from ps._loader import native as _native

_NAME = re.compile(r"^ckpt-v(\d+)-s(\d+)-of-(\d+)\.psckpt$")


def checkpoints(*paths):
    """The complete checkpoints among `paths` (directories or files),
    newest first: [(version, num_shards, [file per shard])]."""
    found = {}
    for p in paths:
        files = [os.path.join(p, f) for f in sorted(os.listdir(p))] if os.path.isdir(p) else [p]
        for f in files:
            m = _NAME.match(os.path.basename(f))
            if m:
                version, shard, shards = (int(g) for g in m.groups())
                found.setdefault((version, shards), {})[shard] = f
    out = []
    for (version, shards), by_shard in sorted(found.items(), reverse=True):
        if len(by_shard) == shards:
            out.append((version, shards, [by_shard[i] for i in range(shards)]))
    return out


def read_checkpoint(*paths, version=None):
    """The newest complete checkpoint among `paths` (or the one at
    `version`) as a dict: job_id, version, spec_text, tensors {name:
    array}, tables {name: (keys, rows)}. ps.Error (DATA_LOSS) for a damaged
    file; ValueError when no complete checkpoint is there."""
    sets = checkpoints(*paths)
    if version is not None:
        sets = [s for s in sets if s[0] == version]
    if not sets:
        raise ValueError(
            f"no complete checkpoint{'' if version is None else f' at version {version}'} "
            f"in {list(paths)} (every shard's ckpt-v<version>-s<shard>-of-<n>.psckpt)"
        )
    return _native.read_checkpoint(sets[0][2])
