"""Staging buffers: the host memory that CUDA tensors are copied through,
reused across calls.

One ``StagingPool`` per device lends buffers by size class (powers of two,
at least ``MIN_CLASS`` bytes) and keeps the ones given back for the next
call of that class, because allocating pinned memory costs far more than a
copy (``cudaHostAlloc`` maps and locks pages). The pool holds at most
``capacity`` bytes, lent or idle: when a request does not fit, idle buffers
of other classes are freed first, and then the request waits until a lent
buffer comes back. A single request larger than the whole capacity is
served once nothing else is lent, and its buffer is freed when it comes
back, so the pool never holds more than ``max(capacity, largest request)``.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from typing import Any, Callable

import torch
from torch import Tensor

DEFAULT_CAPACITY = 256 << 20
MIN_CLASS = 64 << 10
_ALIGN = 64  # regions of one lease start at cache-line boundaries


def capacity_from_env() -> int:
    """``SHOAL_TORCH_STAGING_BYTES``: the most staging memory per device (bytes)."""
    text = os.environ.get("SHOAL_TORCH_STAGING_BYTES", "").strip()
    if not text:
        return DEFAULT_CAPACITY
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not MIN_CLASS <= value <= 1 << 40:
        raise ValueError(
            f'SHOAL_TORCH_STAGING_BYTES="{text}" must be a whole number of bytes from {MIN_CLASS} to {1 << 40}'
        )
    return value


def size_class(nbytes: int) -> int:
    """The buffer size that serves a request of ``nbytes``: the next power of two, at least ``MIN_CLASS``."""
    return max(MIN_CLASS, 1 << max(0, nbytes - 1).bit_length())


def aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


class Lease:
    """A buffer lent to one call until ``release``.

    ``pending``: the copy that last read the buffer (a marker of the copy
    engine, or None); the borrower waits for it before the CPU writes into
    the buffer."""

    def __init__(self, pool: StagingPool, buffer: Tensor, pending: Any) -> None:
        self.buffer = buffer
        self.pending = pending
        self._pool: StagingPool | None = pool

    @property
    def nbytes(self) -> int:
        return int(self.buffer.numel())

    def regions(self, shapes: list[tuple[torch.dtype, int]]) -> list[Tensor]:
        """Flat tensors of the given (dtype, numel), back to back in the buffer, each 64-byte aligned."""
        out, offset = [], 0
        for dtype, numel in shapes:
            size = numel * torch.empty(0, dtype=dtype).element_size()
            out.append(self.buffer[offset : offset + size].view(dtype))
            offset += aligned(size)
        if offset > self.nbytes:
            raise ValueError(f"regions of {offset} bytes do not fit a lease of {self.nbytes}")
        return out

    def release(self, pending: Any = None) -> None:
        """Gives the buffer back (``pending``: a copy still reading it); a second release does nothing."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool._give_back(self.buffer, pending)


def bytes_for(shapes: list[tuple[torch.dtype, int]]) -> int:
    """The lease size that holds ``regions(shapes)``."""
    return sum(aligned(numel * torch.empty(0, dtype=dtype).element_size()) for dtype, numel in shapes)


class StagingPool:
    """Buffers of ``allocate(nbytes)`` (a flat uint8 tensor), lent by size class, at most ``capacity`` bytes held."""

    def __init__(self, capacity: int, allocate: Callable[[int], Tensor]) -> None:
        self.capacity = capacity
        self._allocate = allocate
        self._cond = threading.Condition()
        self._idle: defaultdict[int, list[tuple[Tensor, Any]]] = defaultdict(list)
        self._held = 0  # bytes of every buffer the pool has, lent or idle
        self._lent = 0
        self.allocations = 0  # buffers allocated so far (a measure of reuse)

    @property
    def held_bytes(self) -> int:
        with self._cond:
            return self._held

    @property
    def lent_bytes(self) -> int:
        with self._cond:
            return self._lent

    def acquire(self, nbytes: int, *, block: bool = True) -> Lease | None:
        """A buffer of at least ``nbytes``; waits for room (or returns None when ``block`` is false)."""
        size = size_class(nbytes)
        with self._cond:
            while True:
                lease = self._try(size)
                if lease is not None or not block:
                    return lease
                self._cond.wait()

    def _try(self, size: int) -> Lease | None:
        idle = self._idle[size]
        if idle:
            buffer, pending = idle.pop()
            self._lent += size
            return Lease(self, buffer, pending)
        oversize = size > self.capacity
        if oversize and self._lent:
            return None  # served alone, once nothing else is lent
        while self._held + size > self.capacity and self._free_one_idle():
            pass
        if self._held + size > self.capacity and not oversize:
            return None
        buffer = self._allocate(size)  # under the lock: a failure leaves the counts as they were
        self.allocations += 1
        self._held += size
        self._lent += size
        return Lease(self, buffer, None)

    def _free_one_idle(self) -> bool:
        for size, idle in self._idle.items():
            if idle:
                idle.pop()
                self._held -= size
                return True
        return False

    def _give_back(self, buffer: Tensor, pending: Any) -> None:
        size = buffer.numel()
        with self._cond:
            self._lent -= size
            if size > self.capacity:
                self._held -= size  # an oversize buffer is not kept
            else:
                self._idle[size].append((buffer, pending))
            self._cond.notify_all()

    def clear(self) -> None:
        """Frees the idle buffers."""
        with self._cond:
            while self._free_one_idle():
                pass


def pinned(nbytes: int) -> Tensor:
    """Page-locked host memory (CUDA copies from and to it run asynchronously)."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def pageable(nbytes: int) -> Tensor:
    """Ordinary host memory (for the host copy engine)."""
    return torch.empty(nbytes, dtype=torch.uint8)
