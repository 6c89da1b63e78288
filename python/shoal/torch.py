"""A ``torch.distributed`` backend named ``"shoal"``.

>>> import torch.distributed as dist, shoal.torch   # importing registers the backend
>>> dist.init_process_group("shoal")                # under torchrun or `shoal run`

Every c10d collective runs on shoal: CPU tensors are passed to the core
without copies when they are contiguous (numpy views of their memory); other
tensors go through a contiguous host copy (CUDA tensors after their current
stream is synchronised) that is copied back when the collective finishes.

Asynchronous calls (``async_op=True``, DDP's gradient buckets, FSDP's
prefetches) run on shoal's worker thread while Python continues; a small
completion thread per process waits for shoal's work in issue order, copies
staged results back and completes the torch futures. See docs/torch.md.
"""

from __future__ import annotations

import atexit
import collections
import os
import queue
import socket
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.futures import Future

import shoal

__all__ = ["BACKEND", "ShoalProcessGroup", "ShoalWork"]

BACKEND = "shoal"

Tensor = torch.Tensor
ReduceOp = dist.ReduceOp

# ---------------------------------------------------------------------------
# Reduction operators and dtypes

_OPS = {
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
_BOOL_OPS = {"sum": "max", "prod": "min", "min": "min", "max": "max", "band": "band", "bor": "bor", "bxor": "bxor"}

_SHOAL_DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int32: "int32",
    torch.int64: "int64",
}

# integer types shoal cannot reduce natively: reduced in a wider type, wrapped back on the copy
_WIDENED = {torch.int16: torch.int32, torch.uint16: torch.int32, torch.uint32: torch.int64}

_COMPLEX = (torch.complex64, torch.complex128)


def _op_name(op: Any) -> str:
    """The shoal name of a torch ReduceOp (or RedOpType)."""
    kind = op if isinstance(op, ReduceOp.RedOpType) else op.op
    name = _OPS.get(kind)
    if name is None:
        raise ValueError(
            f"the shoal backend does not support ReduceOp.{kind.name}; supported: SUM, PRODUCT, MIN, MAX, "
            "AVG (floating point), BAND, BOR, BXOR (integers). For PREMUL_SUM, scale the tensor and use SUM."
        )
    return name


def _reduction_for(dtype: torch.dtype, op: str) -> str:
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
    array: np.ndarray
    dtype: str
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


def _numpy_view(host: Tensor) -> tuple[np.ndarray, str]:
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


def _staging(like: Tensor, numel: int) -> Tensor:
    """A flat CPU tensor of ``numel`` elements of ``like``'s type."""
    return torch.empty(numel, dtype=like.dtype)


def _flat_host(t: Tensor) -> _Host:
    """A host buffer of a staging tensor created by this module (always contiguous CPU)."""
    array, dtype = _numpy_view(t)
    return _Host(t, t, array, dtype, False)


# ---------------------------------------------------------------------------
# Completion: torch futures completed when shoal's work is done


class _Completer:
    """One daemon thread per process: waits for shoal works in issue order and
    runs each call's finishing step (copies back staged results); then hands
    the torch future to ``_helpers`` to complete. Counts the calls not yet
    completed, so that shutdown and interpreter exit can wait for them."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[list[Any], Callable[[], None] | None, Future, Any]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._outstanding = 0

    def submit(self, works: list[Any], finish: Callable[[], None] | None, future: Future, result: Any) -> None:
        with self._idle:
            self._outstanding += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="shoal-torch-completer", daemon=True)
                self._thread.start()
        self._queue.put((works, finish, future, result))

    def drain(self, timeout: float | None = None) -> bool:
        """Waits until every submitted call has completed (False if ``timeout`` passed first)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    def _loop(self) -> None:
        while True:
            works, finish, future, result = self._queue.get()
            try:
                _wait_and_finish(works, finish)
            except BaseException as e:  # noqa: BLE001 - every failure belongs to the future
                _helpers.run(lambda future=future, e=e: self._completed(future.set_exception, e))
            else:
                _helpers.run(lambda future=future, result=result: self._completed(future.set_result, result))

    def _completed(self, complete: Callable[[Any], None], value: Any) -> None:
        try:
            complete(value)
        finally:
            with self._idle:
                self._outstanding -= 1
                self._idle.notify_all()


class _Helpers:
    """Threads that complete torch futures. Completing a future runs its
    callbacks (DDP's, comm hooks') on the completing thread, and a callback
    may wait for a later collective (PowerSGD does): so the completion thread
    never runs them itself, and a new helper starts whenever every helper is
    busy, so a waiting callback never holds up the completion it waits for."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1  # an idle helper is reserved for this task
            else:
                threading.Thread(target=self._loop, name="shoal-torch-helper", daemon=True).start()
        self._queue.put(task)

    def _loop(self) -> None:
        while True:
            self._queue.get()()
            with self._lock:
                self._idle += 1


_helpers = _Helpers()


def _wait_and_finish(works: list[Any], finish: Callable[[], None] | None) -> None:
    for w in works:
        w.wait()
    if finish is not None:
        finish()


def _complete(future: Future, result: Any, run: Callable[[], None]) -> None:
    """Runs ``run`` and completes ``future`` with ``result`` or with the error raised."""
    try:
        run()
    except BaseException as e:  # noqa: BLE001 - every failure belongs to the future
        future.set_exception(e)
        return
    future.set_result(result)


_completer = _Completer()


@atexit.register
def _quiesce_at_exit() -> None:
    # A helper thread still inside torch's Future.set_result when the interpreter
    # finalises is torn down in the middle of C++ frames, which aborts the process
    # ("terminate called without an active exception"): let outstanding calls finish.
    _completer.drain(timeout=10.0)


class ShoalWork(dist.Work):
    """The torch work of one shoal call: waits on its future.

    ``direct``: shoal works that leave the results in place (nothing to copy
    back); ``wait()`` then waits for them itself rather than for the future,
    which the completion thread completes a little later."""

    def __init__(
        self, future: Future, before_wait: Callable[[], None] | None = None, direct: list[Any] | None = None
    ) -> None:
        super().__init__()
        self._future = future
        self._before_wait = before_wait
        self._direct = direct

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._before_wait is not None:
            self._before_wait()
        if self._direct is not None and not self._future.done():
            for w in self._direct:
                w.wait()  # raises the collective's error
            return True
        self._future.wait()  # raises the collective's error
        return True

    def is_completed(self) -> bool:
        if self._direct is not None and all(w.is_completed() for w in self._direct):
            return True
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001
            return False
        return True

    def exception(self) -> BaseException | None:
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as e:  # noqa: BLE001
            return e
        return None

    def get_future(self) -> Future:
        return self._future

    def result(self) -> Any:
        return self._future.value()

    def synchronize(self) -> None:
        self.wait()


class _Calls:
    """The shoal calls one torch call makes: collects their works when asynchronous."""

    def __init__(self, async_op: bool) -> None:
        self.async_op = async_op
        self.works: list[Any] = []

    def add(self, outcome: Any) -> None:
        if self.async_op:
            self.works.append(outcome)


def _is_async(opts: Any) -> bool:
    """Whether torch will wait right away (``asyncOp`` is False) or later (True, or older torch)."""
    return bool(getattr(opts, "asyncOp", True))


# ---------------------------------------------------------------------------
# One shoal world per process, and the communicators of torch's groups


@dataclass
class _Runtime:
    """The backend's own child of this process's shoal world.

    ``root`` spans the world in torch's rank order; torch sub-groups are made
    from it. ``groups_made`` counts ``root.new_group`` calls: shoal derives a
    group's id from that count, so members of a new group first agree on it
    (see ``_make_subgroup``)."""

    root: shoal.Group | None = None
    groups_made: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_runtime = _Runtime()


def _shoal_world(store: dist.Store, rank: int, size: int) -> shoal.Group:
    """The process's shoal world: the one ``shoal.init()`` made, else a new one met through torch's store."""
    if shoal.is_initialized():
        world = shoal.world()
        if world.size != size:
            raise RuntimeError(
                f"shoal was initialised with {world.size} ranks but torch's default group has {size}; "
                "call dist.init_process_group with the same world"
            )
        return world
    return shoal.init(rank=rank, world_size=size, addr=_store_address(store, rank, size))


def _store_address(store: dist.Store, rank: int, size: int) -> str:
    """``host:port`` where rank 0 will serve shoal's rendezvous store, agreed through torch's store.

    torch's own store may already listen on MASTER_PORT, so rank 0 picks a
    free port and publishes it."""
    if size == 1:
        return "127.0.0.1:1"  # a single process serves a private store; the address is unused
    key = "shoal/store_addr"
    if rank == 0:
        host = os.environ.get("MASTER_ADDR") or socket.gethostname()
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        store.set(key, f"{host}:{port}")
    return store.get(key).decode()


def _make_root(store: dist.Store, rank: int, size: int) -> shoal.Group:
    """The backend's child of the world, ordered so that its rank r is torch's rank r."""
    world = _shoal_world(store, rank, size)
    store.set(f"shoal/world_rank/{rank}", str(world.rank))
    order = [int(store.get(f"shoal/world_rank/{r}")) for r in range(size)]
    root = world.new_group(order)
    assert root is not None and root.rank == rank
    return root


def _make_subgroup(store: dist.Store, group_rank: int, global_ranks: list[int]) -> shoal.Group:
    """The shoal communicator of a torch sub-group; called by its members only.

    shoal's ``new_group`` derives the group id from how many groups the parent
    made before, which differs between ranks when only members call it. So
    the members agree on the largest count among them (through the group's
    store), each advances its own count to it with throwaway groups, and then
    all make the group with the same count: the same id on every member, and
    an id no earlier group of any of them used."""
    rt = _runtime
    assert rt.root is not None
    size = len(global_ranks)
    store.set(f"shoal/groups_made/{group_rank}", str(rt.groups_made))
    target = max(int(store.get(f"shoal/groups_made/{r}")) for r in range(size))
    while rt.groups_made < target:
        rt.root.new_group([0])
        rt.groups_made += 1
    group = rt.root.new_group(list(global_ranks))
    rt.groups_made += 1
    assert group is not None and group.rank == group_rank, (group, group_rank)
    return group


def _create_process_group(opts: Any, backend_options: Any = None) -> ShoalProcessGroup:
    """The backend creator torch calls (extended API) on every member of a new group."""
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    ranks = list(opts.global_ranks_in_group)
    rt = _runtime
    with rt.lock:
        if ranks and rt.root is None:
            raise RuntimeError("the shoal backend makes sub-groups of a default group that uses shoal as well")
        if not ranks:
            # the default group (torch passes no ranks): every rank of the job is here
            rt.root = _make_root(store, rank, size)
            rt.groups_made = 0
            group = rt.root
        else:
            group = _make_subgroup(store, rank, ranks)
    return ShoalProcessGroup(group, rank, size)


# ---------------------------------------------------------------------------
# The process group


@dataclass
class _PendingRecv:
    """A posted receive: run in issue order when it (or a later one) is waited for."""

    buf: _Host
    src: int
    tag: int
    future: Future


class ShoalProcessGroup(dist.ProcessGroup):
    """A torch process group whose collectives run on a shoal communicator."""

    def __init__(self, group: shoal.Group, rank: int, size: int) -> None:
        super().__init__(rank, size)
        self._group = group
        self._rank = rank
        self._size = size
        self._recvs: collections.deque[_PendingRecv] = collections.deque()
        self._recv_lock = threading.RLock()  # a receive's callbacks may wait for another receive
        self._coalesced: list[ShoalWork] | None = None
        self._name = ""
        self._desc = ""

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    def __repr__(self) -> str:
        return f"ShoalProcessGroup(rank={self._rank}, size={self._size}, members={self._group.members})"

    # torch names and describes the group after creating it (DeviceMesh and
    # functional collectives look groups up by name); a Python group keeps them itself
    def setGroupName(self, name: str) -> None:  # noqa: N802 - torch's name
        self._name = name

    def getGroupName(self) -> str:  # noqa: N802 - torch's name
        return self._name

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802 - torch's name
        self._desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802 - torch's name
        return self._desc

    def _get_backend(self, device: Any = None) -> ShoalProcessGroup:
        """This group serves every device itself (torch asks, e.g. in batch_isend_irecv)."""
        return self

    supports_coalescing = False  # batch_isend_irecv then issues the operations one by one

    @property
    def shoal_group(self) -> shoal.Group:
        """The shoal communicator behind this group."""
        return self._group

    # -- issuing -------------------------------------------------------------

    def _launch(
        self,
        opts: Any,
        result: Any,
        issue: Callable[[_Calls], None],
        finish: Callable[[], None] | None = None,
    ) -> ShoalWork:
        """Issues a call's shoal collectives and returns its work. Synchronous
        calls run inline; asynchronous ones on shoal's worker thread, finished
        by the completion thread."""
        future = Future()
        calls = _Calls(_is_async(opts))
        issue(calls)
        direct = None
        if calls.async_op:
            _completer.submit(calls.works, finish, future, result)
            direct = calls.works if finish is None else None
        else:
            _complete(future, result, finish or (lambda: None))
        work = ShoalWork(future, direct=direct)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def _root(self, root: int) -> int:
        if not 0 <= root < self._size:
            raise ValueError(f"root {root} is not a rank of this group of {self._size}")
        return root

    # -- allreduce and reduce ------------------------------------------------

    def allreduce(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.AllreduceOptions()
        _single(tensors, "allreduce")
        return self.allreduce_coalesced(tensors, opts)

    def allreduce_coalesced(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        """Reduces every tensor of the list (as DDP and the coalescing manager do)."""
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        op = _op_name(opts.reduceOp)
        ops = [_reduction_for(t.dtype, op) for t in tensors]
        bufs = [_host(t, reduce=True) for t in tensors]

        def issue(calls: _Calls) -> None:
            for b, shoal_op in zip(bufs, ops):
                calls.add(self._group.allreduce(b.array, shoal_op, dtype=b.dtype, async_op=calls.async_op))

        return self._launch(opts, tensors, issue, _copy_back(bufs))

    def reduce(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.ReduceOptions()
        _single(tensors, "reduce")
        root = self._root(opts.rootRank)
        op = _reduction_for(tensors[0].dtype, _op_name(opts.reduceOp))
        b = _host(tensors[0], reduce=True)

        def issue(calls: _Calls) -> None:
            calls.add(self._group.reduce(b.array, root, op, dtype=b.dtype, async_op=calls.async_op))

        return self._launch(opts, tensors, issue, _copy_back([b]) if self._rank == root else None)

    # -- broadcast, gather, scatter ------------------------------------------

    def broadcast(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.BroadcastOptions()
        _single(tensors, "broadcast")
        root = self._root(opts.rootRank)
        b = _host(tensors[0], fill=self._rank == root)

        def issue(calls: _Calls) -> None:
            calls.add(self._group.broadcast(b.array, root, dtype=b.dtype, async_op=calls.async_op))

        return self._launch(opts, tensors, issue, _copy_back([b]))

    def gather(self, output_tensors: list[list[Tensor]], input_tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.GatherOptions()
        _single(input_tensors, "gather")
        root = self._root(opts.rootRank)
        outs = output_tensors[0] if self._rank == root else []
        if self._rank == root:
            self._check_list(outs, input_tensors[0], "gather output")
        inp = _host(input_tensors[0])
        flat = _staging(input_tensors[0], self._size * inp.host.numel()) if self._rank == root else None

        def issue(calls: _Calls) -> None:
            out = None if flat is None else _flat_host(flat).array
            calls.add(self._group.gather(inp.array, root, out, dtype=inp.dtype, async_op=calls.async_op))

        finish = (lambda: _unpack(flat, outs)) if flat is not None else None
        return self._launch(opts, output_tensors, issue, finish)

    def gather_single(self, output: Tensor, input: Tensor, opts: Any = None) -> ShoalWork:  # noqa: A002
        """gather into one tensor of size * input.numel() elements at the root."""
        opts = opts if opts is not None else dist.GatherOptions()
        root = self._root(opts.rootRank)
        inp = _host(input)
        out = None
        if self._rank == root:
            _check_numel(output, self._size * input.numel(), "gather_single output")
            out = _host(output, fill=False)

        def issue(calls: _Calls) -> None:
            o = None if out is None else out.array
            calls.add(self._group.gather(inp.array, root, o, dtype=inp.dtype, async_op=calls.async_op))

        return self._launch(opts, [output], issue, _copy_back([out]) if out is not None else None)

    def scatter(self, output_tensors: list[Tensor], input_tensors: list[list[Tensor]], opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.ScatterOptions()
        _single(output_tensors, "scatter")
        root = self._root(opts.rootRank)
        out = _host(output_tensors[0], fill=False)
        flat = None
        if self._rank == root:
            ins = input_tensors[0]
            self._check_list(ins, output_tensors[0], "scatter input")
            flat = _pack(ins)

        def issue(calls: _Calls) -> None:
            x = None if flat is None else _flat_host(flat).array
            calls.add(self._group.scatter(x, out.array, root, dtype=out.dtype, async_op=calls.async_op))

        return self._launch(opts, output_tensors, issue, _copy_back([out]))

    # -- allgather -----------------------------------------------------------

    def allgather(self, output_tensors: list[list[Tensor]], input_tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.AllgatherOptions()
        _single(input_tensors, "allgather")
        return self.allgather_coalesced(output_tensors, input_tensors, opts)

    def allgather_coalesced(
        self, output_lists: list[list[Tensor]], input_tensors: list[Tensor], opts: Any = None
    ) -> ShoalWork:
        """For each input, every rank's copy into the matching output list."""
        opts = opts if opts is not None else dist.AllgatherOptions()
        if len(output_lists) != len(input_tensors):
            raise ValueError(f"allgather: {len(output_lists)} output lists for {len(input_tensors)} inputs")
        for outs, t in zip(output_lists, input_tensors):
            self._check_list(outs, t, "allgather output")
        ins = [_host(t) for t in input_tensors]
        flats = [_staging(t, self._size * t.numel()) for t in input_tensors]

        def issue(calls: _Calls) -> None:
            for b, flat in zip(ins, flats):
                out = _flat_host(flat).array
                calls.add(self._group.allgather(b.array, out, dtype=b.dtype, async_op=calls.async_op))

        def finish() -> None:
            for flat, outs in zip(flats, output_lists):
                _unpack(flat, outs)

        return self._launch(opts, output_lists, issue, finish)

    def all_gather_single(self, output: Tensor, input: Tensor, opts: Any = None) -> ShoalWork:  # noqa: A002
        """``all_gather_into_tensor``: every rank's ``input`` concatenated into ``output``."""
        return self.all_gather_single_coalesced([output], [input], opts)

    def all_gather_single_coalesced(self, outputs: list[Tensor], inputs: list[Tensor], opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.AllgatherOptions()
        for o, i in zip(outputs, inputs):
            _check_numel(o, self._size * i.numel(), "all_gather_into_tensor output")
            _same_dtype(o, i, "all_gather_into_tensor")
        ins = [_host(t) for t in inputs]
        outs = [_host(t, fill=False) for t in outputs]

        def issue(calls: _Calls) -> None:
            for i, o in zip(ins, outs):
                calls.add(self._group.allgather(i.array, o.array, dtype=i.dtype, async_op=calls.async_op))

        return self._launch(opts, outputs, issue, _copy_back(outs))

    # -- reduce_scatter ------------------------------------------------------

    def reduce_scatter(
        self, output_tensors: list[Tensor], input_tensors: list[list[Tensor]], opts: Any = None
    ) -> ShoalWork:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        _single(output_tensors, "reduce_scatter")
        out_t = output_tensors[0]
        self._check_list(input_tensors[0], out_t, "reduce_scatter input")
        op = _reduction_for(out_t.dtype, _op_name(opts.reduceOp))
        flat = _host(_pack(input_tensors[0]), reduce=True)
        out = _host(out_t, reduce=True, fill=False)

        def issue(calls: _Calls) -> None:
            calls.add(self._group.reduce_scatter(flat.array, out.array, op, dtype=out.dtype, async_op=calls.async_op))

        return self._launch(opts, output_tensors, issue, _copy_back([out]))

    def reduce_scatter_single(self, output: Tensor, input: Tensor, opts: Any = None) -> ShoalWork:  # noqa: A002
        """``reduce_scatter_tensor``: block r of the reduced ``input`` into rank r's ``output``."""
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    def reduce_scatter_single_coalesced(
        self, outputs: list[Tensor], inputs: list[Tensor], opts: Any = None
    ) -> ShoalWork:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        op = _op_name(opts.reduceOp)
        for o, i in zip(outputs, inputs):
            _check_numel(i, self._size * o.numel(), "reduce_scatter_tensor input")
            _same_dtype(o, i, "reduce_scatter_tensor")
        ops = [_reduction_for(t.dtype, op) for t in outputs]
        ins = [_host(t, reduce=True) for t in inputs]
        outs = [_host(t, reduce=True, fill=False) for t in outputs]

        def issue(calls: _Calls) -> None:
            for i, o, shoal_op in zip(ins, outs, ops):
                calls.add(
                    self._group.reduce_scatter(i.array, o.array, shoal_op, dtype=o.dtype, async_op=calls.async_op)
                )

        return self._launch(opts, outputs, issue, _copy_back(outs))

    # -- alltoall ------------------------------------------------------------

    def alltoall(self, output_tensors: list[Tensor], input_tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        """Input q goes to rank q; output q came from rank q (sizes may differ per pair)."""
        opts = opts if opts is not None else dist.AllToAllOptions()
        n = self._size
        if len(input_tensors) != n or len(output_tensors) != n:
            raise ValueError(f"alltoall needs {n} input and {n} output tensors")
        sends = [t.reshape(-1) for t in input_tensors]
        issue, finish = self._padded_alltoall(
            sends, [t.numel() for t in output_tensors], lambda parts: _copy_parts(parts, output_tensors)
        )
        return self._launch(opts, output_tensors, issue, finish)

    def all_to_all_single(
        self,
        output: Tensor,
        input: Tensor,  # noqa: A002
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> ShoalWork:
        """Rows of ``input`` split by ``input_split_sizes`` (even when empty) go to the ranks in order."""
        opts = opts if opts is not None else dist.AllToAllOptions()
        _same_dtype(output, input, "all_to_all_single")
        n = self._size
        if not output_split_sizes and not input_split_sizes:
            if input.numel() % n or output.numel() != input.numel():
                raise ValueError(
                    f"all_to_all_single without split sizes needs equal input and output sizes divisible by {n}, "
                    f"got {input.numel()} and {output.numel()} elements"
                )
            return self._even_alltoall(output, input, opts)
        in_rows = _splits(input, input_split_sizes, n, "input")
        out_rows = _splits(output, output_split_sizes, n, "output")
        row_in = input[0].numel() if input.dim() and input.shape[0] else 0
        row_out = output[0].numel() if output.dim() and output.shape[0] else 0
        flat_in = input.reshape(-1) if input.is_contiguous() else input.contiguous().reshape(-1)
        sends = list(flat_in.split([r * row_in for r in in_rows]))
        out_counts = [r * row_out for r in out_rows]
        issue, finish = self._padded_alltoall(sends, out_counts, lambda parts: _copy_into_rows(parts, output))
        return self._launch(opts, [output], issue, finish)

    def _even_alltoall(self, output: Tensor, input: Tensor, opts: Any) -> ShoalWork:  # noqa: A002
        i, o = _host(input), _host(output, fill=False)

        def issue(calls: _Calls) -> None:
            calls.add(self._group.alltoall(i.array, o.array, dtype=i.dtype, async_op=calls.async_op))

        return self._launch(opts, [output], issue, _copy_back([o]))

    def _padded_alltoall(
        self, sends: list[Tensor], recv_counts: list[int], deliver: Callable[[list[Tensor]], None]
    ) -> tuple[Callable[[_Calls], None], Callable[[], None]]:
        """An alltoall of blocks of different sizes: every block is padded to the
        largest one of any pair of ranks (agreed by a small allreduce first)."""
        n = self._size
        largest = np.array([max([s.numel() for s in sends] + recv_counts + [0])], dtype=np.int64)
        dtype = sends[0].dtype if sends else torch.uint8
        state: dict[str, Tensor] = {}

        def issue(calls: _Calls) -> None:
            self._group.allreduce(largest, "max")  # synchronous: the block size must be known now
            block = int(largest[0])
            padded_in = torch.zeros(n, block, dtype=dtype)
            for q, s in enumerate(sends):
                padded_in[q, : s.numel()].copy_(s)
            padded_out = torch.empty(n, block, dtype=dtype)
            state["in"], state["out"] = padded_in, padded_out
            if block:
                i, o = _flat_host(padded_in), _flat_host(padded_out)
                calls.add(self._group.alltoall(i.array, o.array, dtype=i.dtype, async_op=calls.async_op))

        def finish() -> None:
            out = state["out"]
            deliver([out[q, :c] for q, c in enumerate(recv_counts)])

        return issue, finish

    # -- barrier and point-to-point ------------------------------------------

    def barrier(self, opts: Any = None) -> ShoalWork:
        opts = opts if opts is not None else dist.BarrierOptions()

        def issue(calls: _Calls) -> None:
            calls.add(self._group.barrier(async_op=calls.async_op))

        return self._launch(opts, [], issue)

    def send(self, tensors: list[Tensor], dst: int, tag: int) -> ShoalWork:
        """Sends right away: shoal's sends do not wait for the receiver (it buffers
        messages that arrive before their receive), so isend + irecv exchanges work."""
        b = self._p2p_buffer(tensors, dst, "send", fill=True)
        future = Future()
        _complete(future, tensors, lambda: self._group.send(b.array, dst, tag, dtype=b.dtype))
        return self._track(ShoalWork(future))

    def recv(self, tensors: list[Tensor], src: int, tag: int) -> ShoalWork:
        """Posts a receive; it runs when its work, or a later receive's, is waited for (in issue order)."""
        op = _PendingRecv(self._p2p_buffer(tensors, src, "recv", fill=False), src, tag, Future())
        with self._recv_lock:
            self._recvs.append(op)
        return self._track(ShoalWork(op.future, before_wait=lambda: self._run_recvs_until(op)))

    def _p2p_buffer(self, tensors: list[Tensor], peer: int, what: str, fill: bool) -> _Host:
        _single(tensors, what)
        if not 0 <= peer < self._size or peer == self._rank:
            raise ValueError(f"{what}: peer {peer} must be another rank of this group of {self._size}")
        return _host(tensors[0], fill=fill)

    def _run_recvs_until(self, target: _PendingRecv) -> None:
        with self._recv_lock:
            while not target.future.done():
                op = self._recvs.popleft()
                _complete(op.future, [op.buf.user], lambda op=op: self._receive(op))

    def _receive(self, op: _PendingRecv) -> None:
        self._group.recv(op.buf.array, op.src, op.tag, dtype=op.buf.dtype)
        op.buf.copy_back()

    def recv_anysource(self, tensors: list[Tensor], tag: int) -> ShoalWork:
        raise NotImplementedError("the shoal backend has no receive from any source; name the source rank")

    recvAnysource = recv_anysource  # noqa: N815 - the name older torch looks up

    def _track(self, work: ShoalWork) -> ShoalWork:
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    # -- coalescing and lifetime ---------------------------------------------

    def start_coalescing(self, device: Any = None) -> None:
        """Calls between start and end run as usual; the end's work waits for all of them."""
        self._coalesced = []

    def end_coalescing(self, device: Any = None) -> ShoalWork:
        works, self._coalesced = self._coalesced or [], None
        future = Future()
        _complete(future, [], lambda: None)

        def wait_all() -> None:
            for w in works:
                w.wait()

        return ShoalWork(future, before_wait=wait_all)

    def shutdown(self) -> None:
        """Waits for this process's outstanding asynchronous calls (the shoal world stays up)."""
        _completer.drain()

    def abort(self) -> None:
        """shoal cannot cancel calls in flight: they end with an error (a dead peer or SHOAL_TIMEOUT)."""

    # -- older torch names ---------------------------------------------------

    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single

    # -- checks --------------------------------------------------------------

    def _check_list(self, tensors: list[Tensor], like: Tensor, what: str) -> None:
        if len(tensors) != self._size:
            raise ValueError(f"{what} must hold {self._size} tensors (one per rank), got {len(tensors)}")
        for t in tensors:
            if t.numel() != like.numel() or t.dtype != like.dtype:
                raise ValueError(
                    f"{what}: every tensor must have {like.numel()} elements of {like.dtype}, "
                    f"got {t.numel()} of {t.dtype}"
                )


# ---------------------------------------------------------------------------
# Small helpers


def _single(tensors: list[Tensor], what: str) -> None:
    if len(tensors) != 1:
        raise ValueError(f"the shoal backend's {what} takes exactly one tensor per process, got {len(tensors)}")


def _check_numel(t: Tensor, numel: int, what: str) -> None:
    if t.numel() != numel:
        raise ValueError(f"{what} must have {numel} elements, got {t.numel()}")


def _same_dtype(a: Tensor, b: Tensor, what: str) -> None:
    if a.dtype != b.dtype:
        raise ValueError(f"{what}: input and output must have the same dtype, got {b.dtype} and {a.dtype}")


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


def _splits(t: Tensor, sizes: list[int], n: int, what: str) -> list[int]:
    """Rows per rank along dim 0: ``sizes``, or an even split when empty."""
    rows = t.shape[0] if t.dim() else 1
    if not sizes:
        if rows % n:
            raise ValueError(f"all_to_all_single: {what} has {rows} rows, not divisible by the group size {n}")
        return [rows // n] * n
    if len(sizes) != n or sum(sizes) != rows or min(sizes) < 0:
        raise ValueError(f"all_to_all_single: {what} split sizes {list(sizes)} do not split {rows} rows in {n}")
    return list(sizes)


def _register() -> None:
    if BACKEND.upper() in dist.Backend._plugins:
        return
    try:
        dist.Backend.register_backend(BACKEND, _create_process_group, extended_api=True, devices=["cpu", "cuda"])
    except TypeError:  # torch before 2.2 has no devices argument
        dist.Backend.register_backend(BACKEND, _create_process_group, extended_api=True)


_register()
