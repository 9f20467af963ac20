"""ps: train models on the parameter servers from Python.

A Python process joins a job as one of its workers (ps.Worker), holds the
job's dense tensors and sparse-table rows on the shards (ps.Session, numpy;
ps.torch for PyTorch modules and embedding bags) and reports its metrics to
the coordinator like ps_worker, so psctl sees it as any other worker.
Importing ps needs numpy only; ps.torch needs torch. docs/python.md.
"""

from ps._loader import native as _native
from ps.checkpoint import read_checkpoint
from ps.data import Data
from ps.session import Session
from ps.worker import Job, Worker

Error = _native.Error
InvalidArgument = _native.InvalidArgument
Cancelled = _native.Cancelled
Unavailable = _native.Unavailable

__all__ = [
    "Cancelled",
    "Data",
    "Error",
    "InvalidArgument",
    "Job",
    "Session",
    "Unavailable",
    "Worker",
    "read_checkpoint",
]
