"""DDP against one-process training, shared by the pipeline workers: the
same model trained data-parallel (each rank its slice of every batch) and
in one process (the whole batch) must end with the same parameters."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def assert_ddp_matches_one_process(
    model: nn.Sequential, r: int, n: int, *, batch: int, steps: int, rtol: float = 1e-5, **ddp_args: Any
) -> None:
    """Trains `model` under DDP (`ddp_args`) on rank `r`'s `batch` rows of
    each step's `n * batch`, and a copy of it on all of them, with SGD."""
    reference = copy.deepcopy(model)
    ddp = DDP(model, **ddp_args)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    dev = next(model.parameters()).device
    inputs, outputs = model[0].in_features, model[-1].out_features
    gen = torch.Generator(device="cpu").manual_seed(1)
    mine = slice(r * batch, (r + 1) * batch)
    for _ in range(steps):
        data = torch.randn(n * batch, inputs, generator=gen).to(dev)
        target = torch.randn(n * batch, outputs, generator=gen).to(dev)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(data[mine]), target[mine]).backward()
        opt.step()
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(data), target).backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=rtol), (
            f"DDP drifted from one-process training by {(p - q).abs().max()}"
        )
