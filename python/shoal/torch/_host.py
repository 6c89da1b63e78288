"""Tensors as host buffers for shoal: the reduction ops and dtypes shoal
handles, numpy views of CPU tensors, staging copies for the rest, and the
packing of tensor lists into flat buffers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from shoal._buffers import SUPPORTED_DTYPES, itemsize
from shoal._types import DTypeName, ReduceOpName

ReduceOp = dist.ReduceOp

# ---------------------------------------------------------------------------
# Reduction operators and dtypes

_OPS: dict[Any, ReduceOpName] = {
    ReduceOp.SUM: "sum",
    ReduceOp.PRODUCT: "prod",
    ReduceOp.MIN: "min",
    ReduceOp.MAX: "max",
    ReduceOp.AVG: "avg",
    ReduceOp.BAND: "band",
    ReduceOp.BOR: "bor",
    ReduceOp.BXOR: "bxor",
}

# bool tensors reduce as uint8 0/1 values: SUM saturates to "any", PRODUCT to "all"
_BOOL_OPS: dict[str, ReduceOpName] = {
    "sum": "max",
    "prod": "min",
    "min": "min",
    "max": "max",
    "band": "band",
    "bor": "bor",
    "bxor": "bxor",
}

_SHOAL_DTYPES: dict[torch.dtype, DTypeName] = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int32: "int32",
    torch.int64: "int64",
}


def _check_dtypes_against_core() -> None:
    """Every element type of the Rust core (``_shoal.dtypes()``) has exactly one
    torch type here, of its size: a type added to the core must be added here."""
    mapped = sorted(_SHOAL_DTYPES.values())
    wrong_size = [n for t, n in _SHOAL_DTYPES.items() if t.itemsize != itemsize(n)]
    if mapped != sorted(SUPPORTED_DTYPES) or wrong_size:
        raise ImportError(
            f"shoal.torch's dtype table {mapped} (wrong sizes: {wrong_size}) is not the core's {SUPPORTED_DTYPES}"
        )


_check_dtypes_against_core()

# integer types shoal cannot reduce natively: reduced in a wider type, wrapped back on the copy
_WIDENED = {torch.int16: torch.int32, torch.uint16: torch.int32, torch.uint32: torch.int64}

_COMPLEX = (torch.complex64, torch.complex128)


def _op_name(op: Any) -> ReduceOpName:
    """The shoal name of a torch ReduceOp (or RedOpType)."""
    kind = op if isinstance(op, ReduceOp.RedOpType) else op.op
    name = _OPS.get(kind)
    if name is None:
        raise ValueError(
            f"the shoal backend does not support ReduceOp.{kind.name}; supported: SUM, PRODUCT, MIN, MAX, "
            "AVG (floating point), BAND, BOR, BXOR (integers). For PREMUL_SUM, scale the tensor and use SUM."
        )
    return name


def _reduction_for(dtype: torch.dtype, op: ReduceOpName) -> ReduceOpName:
    """The shoal op that reduces tensors of ``dtype`` like torch's ``op``; raises if there is none."""
    if dtype == torch.bool:
        if op not in _BOOL_OPS:
            raise TypeError(f"the shoal backend cannot reduce bool tensors with {op}")
        return _BOOL_OPS[op]
    if dtype in _COMPLEX and op not in ("sum", "avg"):
        raise TypeError(f"the shoal backend reduces complex tensors only with SUM and AVG, not {op}")
    if dtype.is_floating_point and op in ("band", "bor", "bxor"):
        raise TypeError(f"ReduceOp.{op.upper()} needs integer tensors, got {dtype}")
    if not dtype.is_floating_point and dtype not in _COMPLEX and op == "avg":
        raise TypeError(f"ReduceOp.AVG needs floating point tensors, got {dtype}")
    if dtype not in _SHOAL_DTYPES and dtype not in _WIDENED and dtype not in _COMPLEX:
        raise TypeError(f"the shoal backend cannot reduce {dtype} tensors")
    return op


# ---------------------------------------------------------------------------
# Host buffers: a tensor as a numpy array the core reads and writes in place


@dataclass
class _Host:
    """A contiguous CPU tensor holding ``user``'s data, and its numpy view for shoal.

    ``host`` is ``user`` itself (no copy) when ``user`` is a contiguous CPU
    tensor of a type shoal handles; otherwise a staging copy that
    ``copy_back`` writes into ``user``.
    """

    user: Tensor
    host: Tensor
    array: np.ndarray[Any, Any]
    dtype: DTypeName
    staged: bool

    def copy_back(self) -> None:
        if not self.staged:
            return
        self.user.detach().copy_(self.host)
        if self.user.is_cuda:
            torch.cuda.current_stream(self.user.device).synchronize()


def _host(t: Tensor, *, reduce: bool = False, fill: bool = True) -> _Host:
    """``t`` as a host buffer. ``reduce``: the buffer will be reduced (picks a
    reducible type); ``fill``: the collective reads ``t``'s values (otherwise
    a staging copy need not copy them in)."""
    if t.layout != torch.strided:
        raise ValueError(
            f"the shoal backend takes {t.layout} tensors only in all_reduce with SUM "
            "(as Gloo); other calls take dense (strided) tensors"
        )
    src = t.detach()
    wide = _WIDENED.get(src.dtype) if reduce else None
    in_place = src.device.type == "cpu" and src.is_contiguous() and not (src.is_conj() or src.is_neg())
    if in_place and wide is None:
        host, staged = src, False
    elif fill:
        # .to("cpu") runs on the current stream and waits for it: the kernels that wrote t are done
        host = src.resolve_conj().resolve_neg().to("cpu", dtype=wide or src.dtype).contiguous()
        if host.data_ptr() == src.data_ptr():
            host = host.clone()
        staged = True
    else:
        host, staged = torch.empty(src.shape, dtype=wide or src.dtype), True
    array, dtype = _numpy_view(host)
    return _Host(t, host, array, dtype, staged)


def _numpy_view(host: Tensor) -> tuple[np.ndarray[Any, Any], DTypeName]:
    """A numpy array sharing ``host``'s memory and the shoal dtype to call it."""
    dt = host.dtype
    if dt == torch.bfloat16:
        return host.view(torch.int16).numpy(), "bfloat16"
    if dt == torch.bool:
        return host.view(torch.uint8).numpy(), "uint8"
    if dt in _COMPLEX:
        real = torch.view_as_real(host)
        return real.numpy(), _SHOAL_DTYPES[real.dtype]
    if dt in _SHOAL_DTYPES:
        return host.numpy(), _SHOAL_DTYPES[dt]
    # any other type moves as raw bytes (reductions were widened by _host)
    return host.reshape(-1).view(torch.uint8).numpy(), "uint8"


def _per_element(host: Tensor) -> int:
    """How many elements of its shoal dtype one element of ``host`` moves as
    (complex: 2, types moved as raw bytes: their size, others 1), to scale per-rank counts."""
    return _numpy_view(torch.empty(1, dtype=host.dtype))[0].size


def _staging(like: Tensor, numel: int) -> Tensor:
    """A flat CPU tensor of ``numel`` elements of ``like``'s type."""
    return torch.empty(numel, dtype=like.dtype)


def _flat_host(t: Tensor) -> _Host:
    """A host buffer of a staging tensor created by this module (always contiguous CPU)."""
    array, dtype = _numpy_view(t)
    return _Host(t, t, array, dtype, False)


def _copy_back(bufs: list[_Host]) -> Callable[[], None] | None:
    """The finishing step that copies staged buffers back; None when nothing was staged."""
    staged = [b for b in bufs if b.staged]
    if not staged:
        return None

    def run() -> None:
        for b in staged:
            b.copy_back()

    return run


def _pack(tensors: list[Tensor]) -> Tensor:
    """The tensors concatenated into one flat CPU tensor."""
    return torch.cat([t.detach().reshape(-1).cpu() for t in tensors])


def _unpack(flat: Tensor, outs: list[Tensor]) -> None:
    """Copies consecutive blocks of ``flat`` into ``outs``."""
    _copy_parts(list(flat.split([t.numel() for t in outs])), outs)


def _copy_parts(parts: list[Tensor], outs: list[Tensor]) -> None:
    for part, out in zip(parts, outs):
        out.detach().copy_(part.view(out.shape))
    for out in outs:
        if out.is_cuda:
            torch.cuda.current_stream(out.device).synchronize()
            break


def _copy_into_rows(parts: list[Tensor], output: Tensor) -> None:
    flat = torch.cat(parts) if parts else output.new_empty(0)
    output.detach().copy_(flat.view(output.shape))
    if output.is_cuda:
        torch.cuda.current_stream(output.device).synchronize()
