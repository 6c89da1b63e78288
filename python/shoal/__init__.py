"""shoal: collective communication for distributed deep learning.

>>> import numpy as np, shoal
>>> shoal.init()                      # torchrun / Slurm / OpenMPI / `shoal run` env, or explicit
>>> x = np.arange(10, dtype=np.float32) * (shoal.rank() + 1)
>>> shoal.allreduce(x, op="sum")      # in place; returns x
>>> shoal.finalize()
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, overload

from shoal import _log  # noqa: F401  (starts handing Rust's log records to logging)
from shoal._shoal import (
    AbortedError,
    MismatchError,
    PeerDiedError,
    ShoalError,
    ShoalTimeoutError,
    algorithms,
)
from shoal._types import Buffer, CollectiveName, DTypeAlias, DTypeName, ReduceOpName, SupportsBuffer

if TYPE_CHECKING:
    from shoal.group import BufferT, Group, Work

# The errors are defined by the extension; they are raised and caught as shoal's.
for _error in (AbortedError, MismatchError, PeerDiedError, ShoalError, ShoalTimeoutError):
    _error.__module__ = "shoal"
del _error

__all__ = [
    "AbortedError",
    "Buffer",
    "CollectiveName",
    "DTypeAlias",
    "DTypeName",
    "Group",
    "MismatchError",
    "PeerDiedError",
    "ReduceOpName",
    "ShoalError",
    "ShoalTimeoutError",
    "SupportsBuffer",
    "Work",
    "algorithms",
    "allgather",
    "allreduce",
    "alltoall",
    "barrier",
    "broadcast",
    "finalize",
    "gather",
    "init",
    "is_initialized",
    "new_group",
    "rank",
    "recv",
    "reduce",
    "reduce_scatter",
    "scatter",
    "send",
    "size",
    "world",
    "world_size",
]

__version__ = "0.1.0"

_world: Group | None = None


def __getattr__(name: str) -> Any:
    """``Group``, ``Work`` and ``BufferT``, imported on first use: shoal.group needs numpy, which was
    most of ``import shoal``, and commands such as ``shoal sim plan`` never call a collective.
    ``shoal.algo`` too (its registry and hashing are half of what is left), for programs that reach
    it as an attribute of ``shoal``."""
    if name in ("Group", "Work", "BufferT"):
        from shoal import group

        return getattr(group, name)
    if name == "algo":
        import importlib

        return importlib.import_module("shoal.algo")
    raise AttributeError(f"module 'shoal' has no attribute {name!r}")


def init(rank: int | None = None, world_size: int | None = None, addr: str | None = None) -> Group:
    """Joins the job and returns the world group.

    Without arguments the job is described by the environment: ``shoal run``
    and torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Slurm
    (SLURM_PROCID, ...), OpenMPI (OMPI_COMM_WORLD_RANK, ...); with none of
    them, a single process. ``addr`` is the ``host:port`` of the rendezvous
    store, served by rank 0.
    """
    global _world
    if _world is not None:
        raise RuntimeError("shoal.init() was already called; call shoal.finalize() first")
    from shoal import _shoal
    from shoal.group import Group, integer_argument

    if world_size is not None:
        world_size = integer_argument("init", "world_size", world_size)
        if world_size < 1:
            raise ValueError(f"init: world_size={world_size} must be at least 1")
    if rank is not None:
        rank = integer_argument("init", "rank", rank)
        if rank < 0 or (world_size is not None and rank >= world_size):
            limit = f"0..{world_size - 1}" if world_size is not None else ">= 0"
            raise ValueError(f"init: rank={rank} must be in {limit}")

    _world = Group(_shoal.init(rank=rank, world_size=world_size, addr=addr))
    return _world


def is_initialized() -> bool:
    """Whether ``init`` was called (and ``finalize`` not since)."""
    return _world is not None


def world() -> Group:
    """The world group; raises if ``init`` was not called."""
    if _world is None:
        raise RuntimeError("shoal is not initialized: call shoal.init() first")
    return _world


def finalize() -> None:
    """Waits for outstanding work, synchronises all ranks, and leaves the job.

    Every group of the world ends, sub-groups included however many references
    to them remain: their threads, sockets and shared memory are released, and
    using one raises. ``init`` may then join a job again."""
    global _world
    if _world is None:
        return
    group, _world = _world, None
    comm = group._live()
    try:
        comm.synchronize()
        group.barrier()
    finally:
        comm.finalize()  # even when a peer is gone: this rank's resources go all the same


def _group(group: Group | None) -> Group:
    """``group``, or the world group."""
    return group if group is not None else world()


def rank(group: Group | None = None) -> int:
    """This process's rank in ``group`` (default: the world)."""
    return _group(group).rank


def world_size(group: Group | None = None) -> int:
    """The number of ranks in ``group`` (default: the world); also ``shoal.size``."""
    return _group(group).size


size = world_size


def new_group(ranks: list[int], group: Group | None = None, key: str | None = None) -> Group | None:
    """A sub-group of ``ranks`` (ranks of ``group``); every rank must call it alike. None for non-members.

    With ``key`` only the members call it, with the same key (see ``Group.new_group``)."""
    return _group(group).new_group(ranks, key)


def allreduce(
    x: BufferT,
    op: ReduceOpName = "sum",
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
) -> BufferT | Work[BufferT]:
    """Reduces ``x`` across ranks in place; returns ``x`` (or a Work if ``async_op``)."""
    g = _group(group)
    if algorithm is None and async_op is False and dtype is None:
        return g.allreduce(x, op)  # no keywords: they cost the native method a dict
    return g.allreduce(x, op, algorithm=algorithm, async_op=async_op, dtype=dtype)


def broadcast(
    x: BufferT,
    root: int = 0,
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
) -> BufferT | Work[BufferT]:
    """Copies root's ``x`` into ``x`` on every rank, in place."""
    g = _group(group)
    if algorithm is None and async_op is False and dtype is None:
        return g.broadcast(x, root)  # as allreduce
    return g.broadcast(x, root, algorithm=algorithm, async_op=async_op, dtype=dtype)


def reduce(
    x: BufferT,
    root: int = 0,
    op: ReduceOpName = "sum",
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
) -> BufferT | Work[BufferT]:
    """Reduces ``x`` into root's ``x`` in place; other ranks' ``x`` is unchanged."""
    g = _group(group)
    if algorithm is None and async_op is False and dtype is None:
        return g.reduce(x, root, op)  # as allreduce
    return g.reduce(x, root, op, algorithm=algorithm, async_op=async_op, dtype=dtype)


def allgather(
    x: Buffer,
    out: Buffer | None = None,
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
    counts: list[int] | None = None,
) -> Buffer | Work[Buffer]:
    """Every rank's ``x`` concatenated in rank order; ``out`` defaults to shape (size, *x.shape).

    ``counts`` (one per rank, allgatherv): rank q's ``x`` has ``counts[q]`` elements; ``out`` is flat,
    ``sum(counts)`` long."""
    return _group(group).allgather(x, out, algorithm=algorithm, async_op=async_op, dtype=dtype, counts=counts)


def reduce_scatter(
    x: Buffer,
    out: Buffer | None = None,
    op: ReduceOpName = "sum",
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
    counts: list[int] | None = None,
) -> Buffer | Work[Buffer]:
    """Reduces ``x`` (size blocks of equal length, or of ``counts[q]`` elements each) and gives rank r block r."""
    return _group(group).reduce_scatter(x, out, op, algorithm=algorithm, async_op=async_op, dtype=dtype, counts=counts)


def alltoall(
    x: Buffer,
    out: Buffer | None = None,
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
    send_counts: list[int] | None = None,
    recv_counts: list[int] | None = None,
) -> Buffer | Work[Buffer]:
    """Block q of ``x`` goes to rank q; block q of the result came from rank q.

    ``send_counts[q]`` (alltoallv): the elements of ``x`` for rank q, blocks back to back; ``recv_counts[q]``
    (optional, checked): those rank q sends here. The ranks exchange their counts first (one small allgather)."""
    return _group(group).alltoall(
        x,
        out,
        algorithm=algorithm,
        async_op=async_op,
        dtype=dtype,
        send_counts=send_counts,
        recv_counts=recv_counts,
    )


def gather(
    x: Buffer,
    root: int = 0,
    out: Buffer | None = None,
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
) -> Buffer | None | Work[Buffer | None]:
    """Every rank's ``x`` concatenated at root (None elsewhere)."""
    return _group(group).gather(x, root, out, algorithm=algorithm, async_op=async_op, dtype=dtype)


def scatter(
    x: Buffer | None,
    out: BufferT,
    root: int = 0,
    *,
    group: Group | None = None,
    algorithm: str | None = None,
    async_op: bool = False,
    dtype: DTypeName | DTypeAlias | None = None,
) -> BufferT | Work[BufferT]:
    """Block r of root's ``x`` into ``out`` on rank r (``x`` is ignored off root)."""
    return _group(group).scatter(x, out, root, algorithm=algorithm, async_op=async_op, dtype=dtype)


def barrier(
    *,
    group: Group | None = None,
    async_op: bool = False,
) -> Work[None] | None:
    """Returns once every rank of the group has entered the barrier."""
    return _group(group).barrier(async_op=async_op)


def send(
    x: Buffer,
    dst: int,
    tag: int = 0,
    *,
    group: Group | None = None,
    dtype: DTypeName | DTypeAlias | None = None,
) -> None:
    """Sends ``x`` to rank ``dst``; blocks until it is handed to the transport."""
    return _group(group).send(x, dst, tag, dtype=dtype)


@overload
def recv(
    x: BufferT,
    src: int,
    tag: int = 0,
    *,
    group: Group | None = None,
    dtype: DTypeName | DTypeAlias | None = None,
) -> BufferT: ...


@overload
def recv(
    x: BufferT,
    src: None = None,
    tag: int = 0,
    *,
    group: Group | None = None,
    dtype: DTypeName | DTypeAlias | None = None,
) -> tuple[BufferT, int]: ...


def recv(
    x: BufferT,
    src: int | None = None,
    tag: int = 0,
    *,
    group: Group | None = None,
    dtype: DTypeName | DTypeAlias | None = None,
) -> BufferT | tuple[BufferT, int]:
    """Receives into ``x`` from rank ``src`` and returns ``x``; without ``src``,
    the first message with ``tag`` from any rank, and returns ``(x, source)``
    (see ``Group.recv``)."""
    return _group(group).recv(x, src, tag, dtype=dtype)


# Last, once shoal is complete: the algorithms SHOAL_ALGORITHMS names. They import shoal.algo,
# which is half of ``import shoal`` (40 ms), so only when it names some.
if os.environ.get("SHOAL_ALGORITHMS"):
    from shoal.algo._load import load_from_env as _load_algorithms

    _load_algorithms()
