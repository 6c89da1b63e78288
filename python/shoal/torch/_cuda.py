"""The c10d calls on CUDA tensors as pipeline jobs (``_pipeline``): which
tensors take this path, and the steps of each call.

Element-wise calls are chunked (``SHOAL_TORCH_CUDA_CHUNK_BYTES``), so that
copies of one chunk overlap the shoal call of another: ``all_reduce`` (DDP's
buckets), ``broadcast`` and ``reduce``. An all_reduce chunk's host algorithm
is ``chunk_algorithm``'s. ``all_gather_into_tensor``,
``reduce_scatter_tensor`` (FSDP) and the even ``all_to_all_single`` move
whole: the blocks of one rank are not contiguous in the others' buffers, so
a chunk of them is not one shoal call; they still use pinned staging and
complete with events, without blocking the caller.

Other CUDA tensors (non-contiguous, conjugate or negative views, integer
types reduced in a wider type, the list forms) take the host path of
``_host`` as before.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable

from torch import Tensor

import shoal
from shoal._types import ReduceOpName

from . import _copies
from ._copies import Copies
from ._host import _WIDENED, _numpy_view
from ._pipeline import Job, Step, chunk_bounds, submit
from ._work import ShoalWork

DEFAULT_CHUNK_BYTES = 4 << 20
SHARDED_FROM_BYTES = 1 << 20  # the smallest chunk at which shm_sharded was measured ahead


@dataclass(frozen=True)
class Settings:
    enabled: bool
    chunk_bytes: int
    algorithm: str = ""  # SHOAL_TORCH_CUDA_ALGO: "" chunk_algorithm's rule, "auto" the selector, else a name


@functools.cache
def settings() -> Settings:
    """The CUDA path's SHOAL_TORCH_* variables (read once per process)."""
    flag = os.environ.get("SHOAL_TORCH_CUDA_PIPELINE", "").strip().lower()
    if flag not in ("", "1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f'SHOAL_TORCH_CUDA_PIPELINE="{flag}" must be a flag: 1, true, yes, on, 0, false, no or off')
    text = os.environ.get("SHOAL_TORCH_CUDA_CHUNK_BYTES", "").strip()
    try:
        chunk = int(text) if text else DEFAULT_CHUNK_BYTES
    except ValueError:
        chunk = -1
    if not 4096 <= chunk <= 1 << 40:
        raise ValueError(
            f'SHOAL_TORCH_CUDA_CHUNK_BYTES="{text}" must be a whole number of bytes from 4096 to {1 << 40}'
        )
    algorithm = os.environ.get("SHOAL_TORCH_CUDA_ALGO", "").strip()
    if algorithm not in ("", "auto", *shoal.algorithms("allreduce")):
        known = ", ".join(shoal.algorithms("allreduce"))
        raise ValueError(f'SHOAL_TORCH_CUDA_ALGO="{algorithm}" must be auto or an allreduce algorithm: {known}')
    if not algorithm and _algo_names_allreduce():
        algorithm = "auto"  # the user's SHOAL_ALGO decides, through the selector
    return Settings(enabled=flag not in ("0", "false", "no", "off"), chunk_bytes=chunk, algorithm=algorithm)


def _algo_names_allreduce() -> bool:
    """Whether SHOAL_ALGO (``collective:name,...``) forces an allreduce algorithm."""
    entries = os.environ.get("SHOAL_ALGO", "").split(",")
    return any(entry.split(":")[0].strip() == "allreduce" for entry in entries)


def chunk_algorithm(group: shoal.Group, nbytes: int) -> str | None:
    """The host algorithm of an all_reduce chunk of ``nbytes`` (None: the selector's).

    SHOAL_TORCH_CUDA_ALGO names it (``auto``: the selector). By default it is
    ``shm_sharded`` for chunks from 1 MiB where that can run, unless SHOAL_ALGO
    forces an allreduce algorithm. Alone, shm_sharded only ties the selector's
    choice at these sizes; in the pipeline, where the staging copies share the
    host's memory bandwidth with the reduction, it measured 1.15-1.37x faster
    (on the H200 machine: docs/benchmarks.md), as each byte crosses memory once
    per phase with no intermediate buffer."""
    name = settings().algorithm
    if name:
        return None if name == "auto" else name
    if nbytes >= SHARDED_FROM_BYTES and group.shared_memory_algorithms:
        return "shm_sharded"
    return None


_host_engine: Copies | None = None


def use_host_engine(engine: Copies | None) -> None:
    """Makes calls on CPU tensors take the pipeline through ``engine`` (a
    ``HostCopies``), or stop doing so (None): how the process group's use of
    the pipeline is tested without a GPU."""
    global _host_engine
    _host_engine = engine


def takes(tensors: list[Tensor], reduce: bool = False) -> bool:
    """Whether the pipeline serves a call on ``tensors`` (``reduce``: they are reduced)."""
    if not tensors or not settings().enabled:
        return False
    device = tensors[0].device
    return all(
        (t.is_cuda or (_host_engine is not None and t.device.type == "cpu"))
        and t.device == device
        and t.is_contiguous()
        and not (t.is_conj() or t.is_neg())
        and not (reduce and t.dtype in _WIDENED)
        for t in tensors
    )


def _run(tensors: list[Tensor], steps: Iterable[Step], result: Any, copies: Copies | None) -> ShoalWork:
    """Submits a job of ``steps`` on ``tensors`` (all on one device); its work."""
    device = tensors[0].device
    engine = copies or (_host_engine if device.type == "cpu" else None) or _copies.for_device(device)
    future = engine.new_future()
    submit(Job(engine, steps, future, result, tensors))
    return ShoalWork(future)


def _flat(t: Tensor) -> Tensor:
    return t.detach().view(-1)


def _chunks(t: Tensor, chunk_bytes: int | None) -> list[Tensor]:
    flat = _flat(t)
    size = chunk_bytes or settings().chunk_bytes
    return [flat[a:b] for a, b in chunk_bounds(flat.numel(), flat.element_size(), size)]


# ---------------------------------------------------------------------------
# Element-wise calls, chunked


def all_reduce(
    group: shoal.Group,
    tensors: list[Tensor],
    ops: list[ReduceOpName],
    copies: Copies | None = None,
    chunk_bytes: int | None = None,
) -> ShoalWork:
    """Reduces every tensor in place, chunk by chunk (``ops``: the shoal op of each)."""

    def reduce_with(op: ReduceOpName, algorithm: str | None) -> Callable[[list[Tensor]], Any]:
        def issue(staged: list[Tensor]) -> Any:
            array, dtype = _numpy_view(staged[0])
            # the checked method directly: a call naming its dtype skips the short route
            return group._allreduce_checked(array, op, dtype=dtype, algorithm=algorithm, async_op=True)

        return issue

    def step(part: Tensor, op: ReduceOpName) -> Step:
        algorithm = chunk_algorithm(group, part.numel() * part.element_size())
        return Step([(part.dtype, part.numel())], [(part, 0)], reduce_with(op, algorithm), [(0, part)])

    steps = (step(part, op) for t, op in zip(tensors, ops) for part in _chunks(t, chunk_bytes))
    return _run(tensors, steps, tensors, copies)


def broadcast(
    group: shoal.Group, tensor: Tensor, root: int, copies: Copies | None = None, chunk_bytes: int | None = None
) -> ShoalWork:
    """The root's ``tensor`` into every rank's, chunk by chunk."""
    is_root = group.rank == root

    def issue(staged: list[Tensor]) -> Any:
        array, dtype = _numpy_view(staged[0])
        return group._broadcast_checked(array, root, dtype=dtype, async_op=True)

    steps = (
        Step([(part.dtype, part.numel())], [(part, 0)] if is_root else [], issue, [] if is_root else [(0, part)])
        for part in _chunks(tensor, chunk_bytes)
    )
    return _run([tensor], steps, [tensor], copies)


def reduce(
    group: shoal.Group,
    tensor: Tensor,
    root: int,
    op: ReduceOpName,
    copies: Copies | None = None,
    chunk_bytes: int | None = None,
) -> ShoalWork:
    """Every rank's ``tensor`` reduced into the root's, chunk by chunk; the others' stay as they are."""
    is_root = group.rank == root

    def issue(staged: list[Tensor]) -> Any:
        array, dtype = _numpy_view(staged[0])
        return group._reduce_checked(array, root, op, dtype=dtype, async_op=True)

    steps = (
        Step([(part.dtype, part.numel())], [(part, 0)], issue, [(0, part)] if is_root else [])
        for part in _chunks(tensor, chunk_bytes)
    )
    return _run([tensor], steps, [tensor], copies)


# ---------------------------------------------------------------------------
# Calls that move whole buffers


def _whole(
    inputs: list[Tensor],
    outputs: list[Tensor],
    call: Callable[[int, Any, Any, Any], Any],
    result: Any,
    copies: Copies | None,
) -> ShoalWork:
    """One step per (input, output) pair k: the input staged in,
    ``call(k, in_array, out_array, dtype)``, the output staged out."""

    def issue_pair(k: int) -> Callable[[list[Tensor]], Any]:
        def issue(staged: list[Tensor]) -> Any:
            (i, dtype), (o, _) = _numpy_view(staged[0]), _numpy_view(staged[1])
            return call(k, i, o, dtype)

        return issue

    steps = [
        Step([(i.dtype, i.numel()), (o.dtype, o.numel())], [(_flat(i), 0)], issue_pair(k), [(1, _flat(o))])
        for k, (i, o) in enumerate(zip(inputs, outputs))
    ]
    return _run([*inputs, *outputs], steps, result, copies)


def all_gather_into_tensor(
    group: shoal.Group, outputs: list[Tensor], inputs: list[Tensor], copies: Copies | None = None
) -> ShoalWork:
    """Every rank's input concatenated into each output."""
    return _whole(
        inputs,
        outputs,
        lambda _, i, o, dtype: group.allgather(i, o, dtype=dtype, async_op=True),
        outputs,
        copies,
    )


def reduce_scatter_tensor(
    group: shoal.Group,
    outputs: list[Tensor],
    inputs: list[Tensor],
    ops: list[ReduceOpName],
    copies: Copies | None = None,
) -> ShoalWork:
    """Block r of each reduced input into rank r's output (``ops``: the shoal op of each pair)."""
    return _whole(
        inputs,
        outputs,
        lambda k, i, o, dtype: group.reduce_scatter(i, o, ops[k], dtype=dtype, async_op=True),
        outputs,
        copies,
    )


def all_to_all(group: shoal.Group, output: Tensor, input: Tensor, copies: Copies | None = None) -> ShoalWork:  # noqa: A002
    """Equal blocks of ``input`` to the ranks in order; block q of ``output`` from rank q."""
    return _whole(
        [input],
        [output],
        lambda _, i, o, dtype: group.alltoall(i, o, dtype=dtype, async_op=True),
        [output],
        copies,
    )
