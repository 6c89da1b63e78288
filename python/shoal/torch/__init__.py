"""A ``torch.distributed`` backend named ``"shoal"`` (torch 2.4 and newer).

>>> import torch.distributed as dist, shoal.torch   # importing registers the backend
>>> dist.init_process_group("shoal")                # under torchrun or `shoal run`

Every c10d collective runs on shoal: CPU tensors are passed to the core
without copies when they are contiguous (numpy views of their memory); other
tensors go through a contiguous host copy that is copied back when the
collective finishes. Contiguous CUDA tensors go through pinned staging in a
chunked pipeline on a copy stream and complete with CUDA events, without
blocking the calling thread (``_cuda``, ``_pipeline``, ``_copies``,
``_staging``).

The modules: ``_group`` (the process group: each c10d call as shoal calls),
``_work`` (the works it returns and how asynchronous calls complete),
``_host`` (tensors as host buffers, ops and dtypes), ``_world`` (the shoal
communicators of torch's groups), ``_compat`` (what differs between torch
releases, detected rather than assumed). See docs/torch.md.
"""

from __future__ import annotations

from ._compat import let_monitored_barrier_take, register_backend
from ._group import BACKEND, DEVICES, ShoalProcessGroup, create_process_group
from ._work import ShoalWork

__all__ = ["BACKEND", "ShoalProcessGroup", "ShoalWork"]

register_backend(BACKEND, create_process_group, devices=DEVICES)
let_monitored_barrier_take(BACKEND)
