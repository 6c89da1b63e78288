"""What an algorithm written in Python is made of: the call shape it is built
for, regions of the call's buffers, and the builder that records, for one
rank, what moves where in program order. The Rust ``PlanBuilder`` lowers the
record into steps: it infers every dependency from the regions and splits
transfers into pipelined pieces, exactly as for the built-in algorithms."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional, cast

from shoal._types import CollectiveName

DEFAULT_CHUNK = 1 << 18
"""Elements per pipelined piece when none is given: SHOAL_CHUNK_BYTES's default (1 MiB) of 4-byte elements."""

BUFFERS = ("input", "output", "scratch")

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""Files of shoal.algo, skipped when naming the line that made an operation."""

MAX_INDEX = (1 << 64) - 1
"""The largest offset or length the Rust side takes; it refuses sizes past the
limits of a call (docs/algorithms.md, "Limits") naming the algorithm."""

RegionTuple = tuple[str, int, int]
ShapeTuple = tuple[str, int, int, int, int, int, Optional[list[int]]]
"""A call shape as ``shoal._shoal`` passes it."""
OpTuple = tuple[str, int, int, Optional[RegionTuple], Optional[RegionTuple]]
"""An operation as Rust lowers it: (kind, peer, round, src, dst)."""


@dataclass(frozen=True)
class Shape:
    """The call an algorithm builds plans for (shoal_plan::CallShape): ``count``
    elements per rank (the buffer contract per collective is in docs/algorithms.md),
    pieces of at most ``chunk`` elements, ``ranks_per_host`` ranks per host in
    contiguous blocks (1 when irregular)."""

    collective: CollectiveName
    world: int
    count: int
    root: int = 0
    chunk: int = DEFAULT_CHUNK
    ranks_per_host: int = 1
    counts: tuple[int, ...] | None = None

    def as_tuple(self) -> ShapeTuple:
        """The form ``shoal._shoal`` takes."""
        counts = None if self.counts is None else list(self.counts)
        return (self.collective, self.world, self.count, self.root, self.chunk, self.ranks_per_host, counts)

    @staticmethod
    def from_tuple(t: ShapeTuple) -> Shape:
        collective, world, count, root, chunk, per_host, counts = t
        name = cast(CollectiveName, collective)  # the core's own names
        return Shape(name, world, count, root, chunk, per_host, None if counts is None else tuple(counts))


@dataclass(frozen=True)
class Region:
    """``len`` elements of one of the call's buffers from ``offset`` (in elements)."""

    buf: str
    offset: int
    len: int

    def __post_init__(self) -> None:
        if self.buf not in BUFFERS:
            raise ValueError(f"Region: buffer must be one of {', '.join(BUFFERS)}, got {self.buf!r}")
        for name in ("offset", "len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"Region: {name} must be a non-negative int, got {value!r}")
            if value > MAX_INDEX:
                raise ValueError(f"Region: {name} {value} does not fit in 64 bits")

    def sub(self, offset: int, length: int) -> Region:
        """The region ``[offset, offset + length)`` relative to this one."""
        if offset < 0 or length < 0 or offset + length > self.len:
            raise ValueError(f"{self}.sub({offset}, {length}) is outside it")
        return Region(self.buf, self.offset + offset, length)

    def split(self, parts: int) -> list[Region]:
        """``parts`` blocks as even as can be, the first ``len % parts`` one element
        longer: the blocks of the built-in ring and halving algorithms."""
        base, extra = divmod(self.len, parts)
        return [self.sub(i * base + min(i, extra), base + (i < extra)) for i in range(parts)]

    def __str__(self) -> str:
        return f"{self.buf}[{self.offset}:{self.offset + self.len}]"


def input(offset: int, length: int) -> Region:  # noqa: A001 (the buffer's name)
    """A region of the call's input (read-only)."""
    return Region("input", offset, length)


def output(offset: int, length: int) -> Region:
    """A region of the call's output."""
    return Region("output", offset, length)


class Builder:
    """Records the operations of one rank, in program order. Messages match by
    ``(peer, round)``: a ``send(p, k, ...)`` on rank r meets the ``recv(r, k, ...)``
    or ``recv_reduce(r, k, ...)`` on rank p; use each round once per peer pair and
    direction. Nothing waits on anything by hand: the lowering orders every step
    after the steps whose regions it depends on."""

    def __init__(self, shape: Shape, rank: int, *, lines: bool = True) -> None:
        self.shape = shape
        self.rank = rank
        self.ops: list[OpTuple] = []
        self.lines = lines
        self.where: list[str] = []
        """Per operation, the line of the algorithm that made it (for errors;
        empty when built without ``lines``: a third of the cost of an operation)."""
        self.scratch_len = 0

    @property
    def world(self) -> int:
        return self.shape.world

    @property
    def count(self) -> int:
        return self.shape.count

    @property
    def root(self) -> int:
        return self.shape.root

    def scratch(self, length: int) -> Region:
        """``length`` fresh elements of private scratch memory."""
        if isinstance(length, int) and self.scratch_len + length > MAX_INDEX:
            raise ValueError(f"scratch: {self.scratch_len + length} elements do not fit in 64 bits")
        region = Region("scratch", self.scratch_len, length)
        self.scratch_len += length
        return region

    def send(self, peer: int, round: int, src: Region) -> None:
        """Sends ``src`` to ``peer`` (in pieces of at most ``chunk`` elements)."""
        self._message("send", peer, round, src)

    def recv(self, peer: int, round: int, dst: Region) -> None:
        """Receives ``peer``'s send of the same round into ``dst``."""
        self._message("recv", peer, round, dst)

    def recv_reduce(self, peer: int, round: int, dst: Region) -> None:
        """Receives ``peer``'s send of the same round and reduces it into ``dst``."""
        self._message("recv_reduce", peer, round, dst)

    def copy(self, src: Region, dst: Region) -> None:
        """``dst = src``."""
        self._local("copy", src, dst)

    def reduce(self, src: Region, dst: Region) -> None:
        """``dst = dst (op) src``."""
        self._local("reduce", src, dst)

    def _message(self, kind: str, peer: int, round: int, region: Region) -> None:
        self._check_region(kind, region)
        for name, value in (("peer", peer), ("round", round)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{kind}: {name} must be a non-negative int, got {value!r}")
        ends = (_tuple(region), None) if kind == "send" else (None, _tuple(region))
        self._record((kind, peer, round, *ends))

    def _local(self, kind: str, src: Region, dst: Region) -> None:
        self._check_region(kind, src)
        self._check_region(kind, dst)
        if src.len != dst.len:
            raise ValueError(f"{kind}: {src} has {src.len} elements, {dst} has {dst.len}")
        self._record((kind, 0, 0, _tuple(src), _tuple(dst)))

    def _check_region(self, kind: str, region: object) -> None:
        if not isinstance(region, Region):
            raise TypeError(f"{kind}: expected a shoal.algo.Region, got {type(region).__name__}")

    def _record(self, op: OpTuple) -> None:
        self.ops.append(op)
        if not self.lines:
            return
        # The algorithm's line: the first caller outside shoal.algo (phases included).
        frame = sys._getframe(3)
        while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
            frame = frame.f_back
        self.where.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")


def _tuple(r: Region) -> RegionTuple:
    return (r.buf, r.offset, r.len)


AlgorithmFn = Callable[[Builder], None]
"""An algorithm: given a Builder for one rank of one call shape, records that rank's operations."""


def describe(op: OpTuple) -> str:
    """An operation as the algorithm wrote it, e.g. ``send(1, 0, output[0:4])``."""
    kind, peer, round, src, dst = op
    text = [str(Region(*r)) for r in (src, dst) if r is not None]
    if kind in ("copy", "reduce"):
        return f"{kind}({', '.join(text)})"
    return f"{kind}({peer}, {round}, {text[0]})"
