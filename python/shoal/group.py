"""Groups of ranks and the collectives they run, over numpy arrays or any
C-contiguous buffer, without copying."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np

from shoal._buffers import as_array, dtype_name, itemsize, typed_view
from shoal._shoal import Call, GroupCalls
from shoal._types import Buffer, CollectiveName, DTypeAlias, DTypeName, ReduceOpName

if TYPE_CHECKING:
    from shoal._shoal import Communicator
    from shoal._shoal import Work as CoreWork

BufferT = TypeVar("BufferT", bound=Buffer)
"""An in-place call's buffer: it returns the object it was given."""

R = TypeVar("R")
"""What a ``Work`` gives back once done."""


#: One ``Call`` per distinct description (see ``call_of``), bounded: a
#: program that keeps making new shapes starts over rather than grow it.
_CALLS: dict[tuple[Any, ...], Call] = {}
_CALLS_MAX = 4096


def call_of(
    collective: CollectiveName,
    *,
    count: int = 0,
    dtype: DTypeName = "uint8",
    op: ReduceOpName = "sum",
    root: int = 0,
    algorithm: str | None = None,
) -> Call:
    """The ``Call`` for a description. Calls are immutable, so repeated calls
    (a training loop) reuse one instead of parsing the same names again on
    the hot path (about half a microsecond a call)."""
    key = (collective, count, dtype, op, root, algorithm)
    try:
        return _CALLS[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable argument: let Call name what is wrong with it
        return Call(collective, count=count, dtype=dtype, op=op, root=root, algorithm=algorithm)
    call = Call(collective, count=count, dtype=dtype, op=op, root=root, algorithm=algorithm)
    if len(_CALLS) >= _CALLS_MAX:
        _CALLS.clear()
    _CALLS[key] = call
    return call


# Point-to-point tags share a 32-bit word with a flag bit.
TAG_LIMIT = 1 << 31


def integer_argument(what: str, name: str, value: Any) -> int:
    """``value`` as an int (numpy integers too); a TypeError naming it otherwise."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: {name} must be an int, got {type(value).__name__} {value!r}") from None


def rank_argument(what: str, name: str, value: Any, size: int) -> int:
    """A rank of a group of ``size``; a ValueError naming the argument otherwise."""
    rank = integer_argument(what, name, value)
    if not 0 <= rank < size:
        raise ValueError(f"{what}: {name}={rank} is not a rank of this group of {size} (0..{size - 1})")
    return rank


def tag_argument(what: str, value: Any) -> int:
    """A point-to-point tag (0..2**31-1); a ValueError naming it otherwise."""
    tag = integer_argument(what, "tag", value)
    if not 0 <= tag < TAG_LIMIT:
        raise ValueError(f"{what}: tag={tag} must be in 0..{TAG_LIMIT - 1}")
    return tag


class Work(Generic[R]):
    """An asynchronous collective in flight. ``wait()`` returns its result.

    The call owns its buffers until it completes (the core holds their
    exports): dropping this handle, the arrays, or a ``wait(timeout)`` that
    expires leaves the call running on memory that stays valid."""

    def __init__(self, inner: CoreWork, result: R) -> None:
        self._inner = inner
        self._result = result

    def wait(self, timeout: float | None = None) -> R:
        """Blocks until done (``timeout``: at most that many seconds, then
        ``ShoalTimeoutError`` while the call goes on); raises the collective's
        error if it failed."""
        self._inner.wait(timeout)
        return self._result

    def is_completed(self) -> bool:
        """Whether the collective has finished (successfully or not); never blocks."""
        return self._inner.is_completed()


class Group(GroupCalls):
    """A communicator: the world (from ``shoal.init``) or a ``new_group``.

    ``Group(comm)`` keeps ``comm`` as ``_comm`` (None once closed), in its
    native base ``GroupCalls``. The in-place collectives (``allreduce``,
    ``broadcast``, ``reduce``) are that base's methods
    (crates/shoal-py/src/in_place.rs): a blocking call on a plain buffer
    runs without a Python frame, a fifth of an 8-byte call; any other goes,
    its arguments unchanged, to ``_allreduce_checked``, ``_broadcast_checked``
    or ``_reduce_checked`` here, which run it or name what is wrong. Their
    signatures and documentation are the checked methods' (aliased for type
    checkers at the end of the class)."""

    def __repr__(self) -> str:
        return f"Group(rank={self.rank}, size={self.size}, members={self.members})"

    @property
    def rank(self) -> int:
        """This process's rank in the group (0..size-1)."""
        return self._live().rank

    @property
    def size(self) -> int:
        """The number of ranks in the group."""
        return self._live().size

    @property
    def members(self) -> list[int]:
        """World ranks of the members, in group order."""
        return self._live().members

    @property
    def local_ranks(self) -> list[int]:
        """World ranks on this host."""
        return self._live().local_ranks

    @property
    def shared_memory_algorithms(self) -> bool:
        """Whether the ``shm_*`` algorithms can run: they read peers' memory,
        which needs every rank on this host over shared memory, with
        ``process_vm_readv`` permitted."""
        return self._live().shared_memory_algorithms

    @property
    def timeout(self) -> float:
        """Seconds a call of this group may wait without progress before it
        fails with ``ShoalTimeoutError``: ``SHOAL_TIMEOUT`` (default 300) unless
        set for this group. Setting it (a positive number; longer than a year
        is a year) applies to the calls issued after; groups made from this
        one start from ``SHOAL_TIMEOUT``."""
        return self._live().timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"timeout must be a number of seconds, got {type(seconds).__name__}")
        self._live().timeout = float(seconds)

    @property
    def plans_cached(self) -> int:
        """Compiled plans this process keeps (all groups); at most ``plan_cache_capacity``."""
        return self._live().plans_cached

    @property
    def plan_cache_capacity(self) -> int:
        """The most plans kept (``SHOAL_PLAN_CACHE``); the least recently used go first."""
        return self._live().plan_cache_capacity

    @property
    def cost_model(self) -> dict[str, float]:
        """The selector's cost model: latency ``alpha`` (s), ``beta`` (s/byte moved), ``gamma`` (s/byte reduced)."""
        return self._live().cost_model

    def new_group(self, ranks: list[int], key: str | None = None) -> Group | None:
        """A group of ``ranks`` (ranks of this group, in the new group's order).

        Without ``key`` every rank of this group calls it with the same list;
        non-members get None. With ``key`` only the members call it, with the
        same key (e.g. a name the caller gives the group); making a group of
        the same members with the same key again gives a new group."""
        ranks = [rank_argument("new_group", "rank", r, self.size) for r in ranks]
        if key is not None and not isinstance(key, str):
            raise TypeError(f"new_group: key must be a str or None, got {type(key).__name__}")
        comm = self._live().new_group(ranks, key)
        return None if comm is None else Group(comm)

    def choose_algorithm(
        self, collective: CollectiveName, count: int, dtype: DTypeName = "float32", root: int = 0
    ) -> str:
        """The algorithm the selector would use for such a call."""
        root = rank_argument("choose_algorithm", "root", root, self.size)
        return self._live().choose_algorithm(collective, count, dtype, root)

    def close(self) -> None:
        """Finishes outstanding work and synchronises the members (nothing once closed or finalized)."""
        if self._comm is None or self._comm.finalized:
            return
        self._comm.synchronize()
        self.barrier()
        self._comm = None

    def _live(self) -> Communicator:
        """The communicator; a RuntimeError once the group is closed."""
        if self._comm is None:
            raise RuntimeError("this group was closed")
        return self._comm

    def _run(
        self,
        call: Call,
        inp: np.ndarray[Any, Any] | None,
        out: np.ndarray[Any, Any] | None,
        async_op: bool,
        result: R,
    ) -> R | Work[R]:
        comm = self._comm  # not _live(): one Python call less on the hot path
        if comm is None:
            raise RuntimeError("this group was closed")
        work = comm.collective(call, inp, out, async_op)
        if work is not None:
            return Work(work, result)
        return result

    def _root_check(self, root: int, what: str) -> int:
        return rank_argument(what, "root", root, self.size)

    def _allreduce_checked(
        self,
        x: BufferT,
        op: ReduceOpName = "sum",
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
    ) -> BufferT | Work[BufferT]:
        """Reduces ``x`` across the group with ``op``, in place; returns ``x``
        (or a ``Work`` whose ``wait()`` returns it, if ``async_op``).

        ``algorithm`` forces one of ``shoal.algorithms("allreduce")``;
        ``dtype`` names the element type where the buffer's own cannot (bfloat16).
        (``allreduce`` where the native method's short route declined.)"""
        a, dt, n = typed_view(x, "x", True, dtype)
        call = call_of("allreduce", count=n, dtype=dt, op=op, algorithm=algorithm)
        return self._run(call, a, a, async_op, x)

    def _broadcast_checked(
        self,
        x: BufferT,
        root: int = 0,
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
    ) -> BufferT | Work[BufferT]:
        """Copies the root's ``x`` into ``x`` on every rank, in place; returns ``x`` (or a ``Work``).
        (``broadcast`` where the native method's short route declined.)"""
        root = self._root_check(root, "broadcast")
        a, dt, n = typed_view(x, "x", True, dtype)
        inp = a if self.rank == root else None
        call = call_of("broadcast", count=n, dtype=dt, root=root, algorithm=algorithm)
        return self._run(call, inp, a, async_op, x)

    def _reduce_checked(
        self,
        x: BufferT,
        root: int = 0,
        op: ReduceOpName = "sum",
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
    ) -> BufferT | Work[BufferT]:
        """Reduces ``x`` with ``op`` into the root's ``x``, in place; other ranks' ``x`` is unchanged.
        Returns ``x`` (or a ``Work``). (``reduce`` where the native method's short route declined.)"""
        root = self._root_check(root, "reduce")
        a, dt, n = typed_view(x, "x", self.rank == root, dtype)
        out = a if self.rank == root else None
        call = call_of("reduce", count=n, dtype=dt, op=op, root=root, algorithm=algorithm)
        return self._run(call, a, out, async_op, x)

    def allgather(
        self,
        x: Buffer,
        out: Buffer | None = None,
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
        counts: list[int] | None = None,
    ) -> Buffer | Work[Buffer]:
        """Every rank's ``x`` concatenated in rank order, into ``out`` (by default a
        new array of shape ``(size, *x.shape)``); returns ``out`` (or a ``Work``).

        ``counts`` (one per rank, allgatherv): rank q's ``x`` has ``counts[q]``
        elements; ``out`` is flat, ``sum(counts)`` long."""
        a, dt, n = typed_view(x, "x", False, dtype)
        if counts is not None:
            counts = self._counts_argument("allgather", counts, "x", n)
            if out is None:
                out = np.empty(sum(counts), dtype=a.dtype)
            o = self._out_array(out, dt, sum(counts))
            call = Call("allgather", counts=counts, dtype=dt, algorithm=algorithm)
            return self._run(call, a, o, async_op, out)
        if out is None:
            out = np.empty((self.size, *a.shape), dtype=a.dtype)
        o = self._out_array(out, dt, self.size * n)
        call = call_of("allgather", count=n, dtype=dt, algorithm=algorithm)
        return self._run(call, a, o, async_op, out)

    def reduce_scatter(
        self,
        x: Buffer,
        out: Buffer | None = None,
        op: ReduceOpName = "sum",
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
        counts: list[int] | None = None,
    ) -> Buffer | Work[Buffer]:
        """Reduces ``x`` (``size`` blocks of equal length, or of ``counts[q]`` elements
        each) with ``op`` and gives rank r block r, in ``out`` (by default a new
        array); returns ``out`` (or a ``Work``)."""
        a, dt, total = typed_view(x, "x", False, dtype)
        if counts is not None:
            counts = self._counts_argument("reduce_scatter", counts)
            if total != sum(counts):
                raise ValueError(f"reduce_scatter: x has {total} elements, but counts add up to {sum(counts)}")
            if out is None:
                out = np.empty(counts[self.rank], dtype=a.dtype)
            o = self._out_array(out, dt, counts[self.rank])
            call = Call("reduce_scatter", counts=counts, dtype=dt, op=op, algorithm=algorithm)
            return self._run(call, a, o, async_op, out)
        if total % self.size:
            raise ValueError(f"reduce_scatter: x has {total} elements, not a multiple of the group size {self.size}")
        n = total // self.size
        if out is None:
            out = np.empty(a.size // self.size, dtype=a.dtype)
        o = self._out_array(out, dt, n)
        call = call_of("reduce_scatter", count=n, dtype=dt, op=op, algorithm=algorithm)
        return self._run(call, a, o, async_op, out)

    def alltoall(
        self,
        x: Buffer,
        out: Buffer | None = None,
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
        send_counts: list[int] | None = None,
        recv_counts: list[int] | None = None,
    ) -> Buffer | Work[Buffer]:
        """Block q of ``x`` goes to rank q; block q of ``out`` (by default a new array
        like ``x``) came from rank q. Returns ``out`` (or a ``Work``).

        ``send_counts[q]`` (alltoallv): the elements of ``x`` for rank q, blocks back
        to back; ``recv_counts[q]`` (optional, checked): those rank q sends here. The
        ranks exchange their counts first (one small allgather)."""
        a, dt, total = typed_view(x, "x", False, dtype)
        if send_counts is not None or recv_counts is not None:
            return self._alltoallv(a, dt, total, out, send_counts, recv_counts, algorithm, async_op)
        if total % self.size:
            raise ValueError(f"alltoall: x has {total} elements, not a multiple of the group size {self.size}")
        if out is None:
            out = np.empty_like(a)
        o = self._out_array(out, dt, total)
        call = call_of("alltoall", count=total // self.size, dtype=dt, algorithm=algorithm)
        return self._run(call, a, o, async_op, out)

    def _alltoallv(
        self,
        a: np.ndarray[Any, Any],
        dt: DTypeName,
        total: int,
        out: Buffer | None,
        send_counts: list[int] | None,
        recv_counts: list[int] | None,
        algorithm: str | None,
        async_op: bool,
    ) -> Buffer | Work[Buffer]:
        """alltoall with per-rank counts: the ranks first exchange their counts
        (one small allgather), so that every rank knows the whole matrix, and
        all of them report counts that do not match up alike."""
        if send_counts is None:
            raise ValueError("alltoall: recv_counts needs send_counts too")
        sends = self._counts_argument("alltoall", send_counts, "x", total, "send_counts")
        recvs = (
            [-1] * self.size
            if recv_counts is None
            else self._counts_argument("alltoall", recv_counts, name="recv_counts")
        )
        table = np.empty((self.size, 2, self.size), dtype=np.int64)
        self.allgather(np.array([*sends, *recvs], dtype=np.int64), table)
        matrix = table[:, 0, :]  # matrix[s, d]: what rank s sends to rank d
        for d in range(self.size):
            for s in range(self.size):
                expects = table[d, 1, s]
                if expects >= 0 and expects != matrix[s, d]:
                    raise ValueError(
                        f"alltoall: rank {s} sends {matrix[s, d]} elements to rank {d}, "
                        f"but rank {d} expects {expects} (send_counts and recv_counts must match up)"
                    )
        received = int(matrix[:, self.rank].sum())
        if out is None:
            out = np.empty(received, dtype=a.dtype)
        o = self._out_array(out, dt, received)
        call = Call("alltoall", counts=matrix.ravel().tolist(), dtype=dt, algorithm=algorithm)
        return self._run(call, a, o, async_op, out)

    def _counts_argument(
        self, what: str, counts: list[int], buffer: str | None = None, size: int = 0, name: str = "counts"
    ) -> list[int]:
        """Per-rank counts: one non-negative int per rank (``buffer``, if named, must hold this rank's)."""
        values = [integer_argument(what, name, c) for c in counts]
        if len(values) != self.size or any(c < 0 for c in values):
            raise ValueError(f"{what}: {name} must be {self.size} counts >= 0 (one per rank), got {values}")
        if buffer is not None:
            mine = sum(values) if name == "send_counts" else values[self.rank]
            if size != mine:
                raise ValueError(f"{what}: {buffer} has {size} elements, but {name} says {mine}")
        return values

    def gather(
        self,
        x: Buffer,
        root: int = 0,
        out: Buffer | None = None,
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
    ) -> Buffer | None | Work[Buffer | None]:
        """Every rank's ``x`` concatenated in rank order at the root, into ``out`` (by
        default a new array of shape ``(size, *x.shape)``); returns it at the root,
        None elsewhere (or a ``Work``)."""
        root = self._root_check(root, "gather")
        a, dt, n = typed_view(x, "x", False, dtype)
        o = None
        if self.rank == root:
            if out is None:
                out = np.empty((self.size, *a.shape), dtype=a.dtype)
            o = self._out_array(out, dt, self.size * n)
        else:
            out = None
        call = call_of("gather", count=n, dtype=dt, root=root, algorithm=algorithm)
        return self._run(call, a, o, async_op, out)

    def scatter(
        self,
        x: Buffer | None,
        out: BufferT,
        root: int = 0,
        *,
        algorithm: str | None = None,
        async_op: bool = False,
        dtype: DTypeName | DTypeAlias | None = None,
    ) -> BufferT | Work[BufferT]:
        """Block r of the root's ``x`` (``size`` blocks like ``out``) into ``out`` on
        rank r; ``x`` is ignored off the root. Returns ``out`` (or a ``Work``)."""
        root = self._root_check(root, "scatter")
        o, dt, n = typed_view(out, "out", True, dtype)
        inp = None
        if self.rank == root:
            if x is None:
                raise ValueError("scatter: the root must pass x")
            inp = as_array(x, "x", writable=False)
            if dtype_name(inp, dtype) != dt or inp.nbytes != self.size * o.nbytes:
                raise ValueError(
                    f"scatter: x must hold {self.size} blocks of {n} {dt} (like out), got {inp.size} {inp.dtype}"
                )
        call = call_of("scatter", count=n, dtype=dt, root=root, algorithm=algorithm)
        return self._run(call, inp, o, async_op, out)

    def barrier(self, *, async_op: bool = False) -> Work[None] | None:
        """Returns once every rank of the group has entered the barrier (or a ``Work`` at once)."""
        return self._run(call_of("barrier"), None, None, async_op, None)

    def send(self, x: Buffer, dst: int, tag: int = 0, *, dtype: DTypeName | DTypeAlias | None = None) -> None:
        """Sends ``x`` to rank ``dst`` with ``tag``; blocks until it is handed to the transport."""
        dst = self._peer_check(dst, "send", "dst")
        tag = tag_argument("send", tag)
        a = as_array(x, "x", writable=False)
        dt = dtype_name(a, dtype)
        self._live().send(dst, tag, dt, a)

    @overload
    def recv(self, x: BufferT, src: int, tag: int = 0, *, dtype: DTypeName | DTypeAlias | None = None) -> BufferT: ...

    @overload
    def recv(
        self, x: BufferT, src: None = None, tag: int = 0, *, dtype: DTypeName | DTypeAlias | None = None
    ) -> tuple[BufferT, int]: ...

    def recv(
        self, x: BufferT, src: int | None = None, tag: int = 0, *, dtype: DTypeName | DTypeAlias | None = None
    ) -> BufferT | tuple[BufferT, int]:
        """Receives into ``x`` what rank ``src`` sent with ``tag``; returns ``x``.

        Without ``src`` (receive from any source): the first message with
        ``tag`` from any rank of the group; returns ``(x, source)``. From each
        rank only its next message with ``tag`` can match (messages from one
        rank with one tag are received in the order they were sent, whichever
        receive takes them); among the ranks whose next message has arrived,
        the one that arrived first is taken, so no sender is passed over for
        later arrivals. A message of another size or type fails as with
        ``src``, and so does a wait longer than the group's timeout, naming
        what the other ranks wait for."""
        tag = tag_argument("recv", tag)
        a = as_array(x, "x", writable=True)
        dt = dtype_name(a, dtype)
        if src is None:
            return x, self._live().recv_any(tag, dt, a)
        src = self._peer_check(src, "recv", "src")
        self._live().recv(src, tag, dt, a)
        return x

    def _peer_check(self, peer: int, what: str, name: str) -> int:
        peer = rank_argument(what, name, peer, self.size)
        if peer == self.rank:
            raise ValueError(f"{what}: {name}={peer} is this rank; it must be another rank of this group")
        return peer

    def _out_array(self, out: Buffer, dt: DTypeName, count: int) -> np.ndarray[Any, Any]:
        o = as_array(out, "out", writable=True)
        same_type = o.dtype.name == dt or (dt == "bfloat16" and o.itemsize in (1, 2))
        if not same_type or o.nbytes != count * itemsize(dt):
            raise ValueError(f"out must hold {count} elements of {dt}, got {o.size} of {o.dtype}")
        return o

    if TYPE_CHECKING:
        # The native methods of GroupCalls take the checked methods' arguments.
        allreduce = _allreduce_checked
        broadcast = _broadcast_checked
        reduce = _reduce_checked
