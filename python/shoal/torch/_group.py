"""``ShoalProcessGroup``: the torch process group whose calls run on a shoal communicator."""

from __future__ import annotations

import collections
import functools
import math
import threading
import time
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, cast

import torch
import torch.distributed as dist
from torch import Tensor
from torch.futures import Future

import shoal

from . import _compat, _cuda, _pipeline, _world
from ._host import (
    _copy_back,
    _copy_into_rows,
    _copy_parts,
    _flat_host,
    _Host,
    _host,
    _op_name,
    _pack,
    _per_element,
    _reduction_for,
    _staging,
    _unpack,
)
from ._work import ShoalWork, _Calls, _complete, _completer

BACKEND = "shoal"

_SYNC = types.SimpleNamespace(asyncOp=False)  # the options of a call the backend makes itself and waits for

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _profiled(name: str) -> Callable[[_Method], _Method]:
    """Makes a group method show in ``torch.profiler`` traces as the range
    ``shoal:<name>``, as Gloo's calls show as ``gloo:<name>``. Outside a
    profiler no range is entered: one costs microseconds."""

    def wrap(method: _Method) -> _Method:
        label = f"shoal:{name}"

        @functools.wraps(method)
        def profiled(*args: Any, **kwargs: Any) -> Any:
            if not torch.autograd._profiler_enabled():
                return method(*args, **kwargs)
            with torch.autograd.profiler.record_function(label):
                return method(*args, **kwargs)

        return cast(_Method, profiled)

    return wrap


def create_process_group(opts: Any, backend_options: Any = None) -> ShoalProcessGroup:
    """The backend creator torch calls (extended API) on every member of a new group."""
    _cuda.settings()  # a wrong SHOAL_TORCH_* value fails here, not at the first CUDA call
    group = _world.communicator(opts)
    timeout = _group_timeout(getattr(opts, "timeout", None))
    if timeout is not None:
        group.timeout = timeout
    pg = ShoalProcessGroup(group, opts.group_rank, opts.group_size, store=opts.store)
    _compat.register_devices(pg, DEVICES, _DeviceBackend)
    return pg


DEVICES = ["cpu", "cuda"]


def _group_timeout(timeout: Any) -> float | None:
    """The seconds a group's calls may wait: torch's ``timeout=`` when given
    (``init_process_group``, ``new_group``); None (``SHOAL_TIMEOUT``, default
    300 s) when torch passes its own default, 30 minutes, for which the
    caller asked nothing."""
    if timeout is None or timeout == _compat.default_timeout():
        return None
    seconds = float(timeout.total_seconds())
    return seconds if seconds > 0 else None


@dataclass
class _PendingRecv:
    """A posted receive: run in issue order when it (or a later one) is waited for."""

    buf: _Host
    src: int | None  # None: from any source
    tag: int
    future: Future
    source: int = -1  # the rank it came from, once received

    def source_rank(self) -> int:
        if self.source < 0:
            raise RuntimeError("source_rank(): the receive has not completed")
        return self.source


class ShoalProcessGroup(dist.ProcessGroup):
    """A torch process group whose collectives run on a shoal communicator."""

    def __init__(self, group: shoal.Group, rank: int, size: int, store: dist.Store | None = None) -> None:
        super().__init__(rank, size)
        self._group = group
        self._store = store  # monitored_barrier's
        self._monitored = 0  # monitored barriers so far
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
    # functional collectives look groups up by name); a Python group keeps them
    # itself. The C++ names are what newer torch's C++ side calls; the Python
    # ones are what torch's Python code calls, and on older releases (2.4) their
    # bindings go to the group's C++ backends, of which a Python group has none.
    def setGroupName(self, name: str) -> None:  # noqa: N802 - torch's name
        self._name = name

    def getGroupName(self) -> str:  # noqa: N802 - torch's name
        return self._name

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802 - torch's name
        self._desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802 - torch's name
        return self._desc

    _set_group_name = setGroupName
    _set_group_desc = setGroupDesc
    group_name = property(getGroupName)
    group_desc = property(getGroupDesc)

    def _get_backend(self, device: Any = None) -> ShoalProcessGroup:
        """This group serves every device itself (torch asks, e.g. in batch_isend_irecv)."""
        return self

    supports_coalescing = False  # batch_isend_irecv then issues the operations one by one
    supports_splitting = False  # new_group then creates groups rather than splitting this one

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
        calls = _Calls(_compat.is_async(opts))
        _pipeline.wait_until_issued()  # shoal calls in the same order on every rank
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

    @_profiled("allreduce")
    def allreduce(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        _single(tensors, "allreduce")
        if tensors[0].layout == torch.sparse_coo:
            return self._sparse_allreduce(tensors[0], opts)
        return self.allreduce_coalesced(tensors, opts)

    def _sparse_allreduce(self, t: Tensor, opts: Any) -> ShoalWork:
        """A sparse COO tensor summed as Gloo sums it: every rank's indices and
        values gathered (sizes agreed first), added up, coalesced, and copied
        into ``t``. Runs to its end before returning (its work is complete)."""
        op = _compat.reduce_op(opts)
        if _op_name(op) != "sum":
            raise ValueError(f"the shoal backend reduces sparse tensors with SUM only (as Gloo), got {op}")
        mine = t.detach().coalesce().cpu()
        indices, values = mine.indices().contiguous(), mine.values().contiguous()
        meta = torch.tensor([mine.sparse_dim(), mine.dense_dim(), mine._nnz(), *mine.shape], dtype=torch.int64)
        metas = self._gather_all(meta, [meta.numel()] * self._size)
        if any(not (torch.equal(m[:2], meta[:2]) and torch.equal(m[3:], meta[3:])) for m in metas):
            raise ValueError(
                "sparse all_reduce: the ranks' tensors differ in shape or in sparse and dense dimensions: "
                f"{[m.tolist() for m in metas]} ([sparse_dim, dense_dim, nnz, *shape] per rank)"
            )
        nnz = [int(m[2]) for m in metas]
        row = math.prod(values.shape[1:])  # elements per entry (its dense dimensions)
        all_indices = self._gather_all(indices.reshape(-1), [k * mine.sparse_dim() for k in nnz])
        all_values = self._gather_all(values.reshape(-1), [k * row for k in nnz])
        total = torch.sparse_coo_tensor(
            torch.cat([i.view(mine.sparse_dim(), -1) for i in all_indices], dim=1),
            torch.cat([v.view(-1, *values.shape[1:]) for v in all_values]),
            mine.shape,
            dtype=mine.dtype,
        ).coalesce()
        with torch.no_grad():  # not t.detach(): a sparse copy_ replaces the detached alias's indices, not t's
            t.copy_(total.to(t.device))
        future = Future()
        future.set_result([t])
        return self._track(ShoalWork(future))

    def _gather_all(self, flat: Tensor, counts: list[int]) -> list[Tensor]:
        """Every rank's ``flat`` (rank q's of ``counts[q]`` elements), synchronously."""
        outs = [flat.new_empty(c) for c in counts]
        if sum(counts):
            self._allgather_per_input([outs], [flat], _SYNC, [outs]).wait()
        return outs

    @_profiled("allreduce_coalesced")
    def allreduce_coalesced(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        """Reduces every tensor of the list (as DDP and the coalescing manager do)."""
        op = _op_name(_compat.reduce_op(opts))
        ops = [_reduction_for(t.dtype, op) for t in tensors]
        if _cuda.takes(tensors, reduce=True):
            return self._track(_cuda.all_reduce(self._group, tensors, ops))
        bufs = [_host(t, reduce=True) for t in tensors]

        def issue(calls: _Calls) -> None:
            # Group's checked methods directly (here and below): a call that
            # names its dtype never takes the native short route, and the
            # detour through it cost about 4000 instructions a call.
            for b, shoal_op in zip(bufs, ops):
                calls.add(self._group._allreduce_checked(b.array, shoal_op, dtype=b.dtype, async_op=calls.async_op))

        return self._launch(opts, tensors, issue, _copy_back(bufs))

    @_profiled("reduce")
    def reduce(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        _single(tensors, "reduce")
        root = self._root(_compat.root_rank(opts))
        op = _reduction_for(tensors[0].dtype, _op_name(_compat.reduce_op(opts)))
        if _cuda.takes(tensors, reduce=True):
            return self._track(_cuda.reduce(self._group, tensors[0], root, op))
        b = _host(tensors[0], reduce=True)

        def issue(calls: _Calls) -> None:
            calls.add(self._group._reduce_checked(b.array, root, op, dtype=b.dtype, async_op=calls.async_op))

        return self._launch(opts, tensors, issue, _copy_back([b]) if self._rank == root else None)

    # -- broadcast, gather, scatter ------------------------------------------

    @_profiled("broadcast")
    def broadcast(self, tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        _single(tensors, "broadcast")
        root = self._root(_compat.root_rank(opts))
        if _cuda.takes(tensors):
            return self._track(_cuda.broadcast(self._group, tensors[0], root))
        b = _host(tensors[0], fill=self._rank == root)

        def issue(calls: _Calls) -> None:
            calls.add(self._group._broadcast_checked(b.array, root, dtype=b.dtype, async_op=calls.async_op))

        return self._launch(opts, tensors, issue, _copy_back([b]))

    @_profiled("gather")
    def gather(self, output_tensors: list[list[Tensor]], input_tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        _single(input_tensors, "gather")
        root = self._root(_compat.root_rank(opts))
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

    @_profiled("gather_single")
    def gather_single(self, output: Tensor, input: Tensor, opts: Any = None) -> ShoalWork:  # noqa: A002
        """gather into one tensor of size * input.numel() elements at the root."""
        root = self._root(_compat.root_rank(opts))
        inp = _host(input)
        out = None
        if self._rank == root:
            _check_numel(output, self._size * input.numel(), "gather_single output")
            out = _host(output, fill=False)

        def issue(calls: _Calls) -> None:
            o = None if out is None else out.array
            calls.add(self._group.gather(inp.array, root, o, dtype=inp.dtype, async_op=calls.async_op))

        return self._launch(opts, [output], issue, _copy_back([out]) if out is not None else None)

    @_profiled("scatter")
    def scatter(self, output_tensors: list[Tensor], input_tensors: list[list[Tensor]], opts: Any = None) -> ShoalWork:
        _single(output_tensors, "scatter")
        root = self._root(_compat.root_rank(opts))
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

    @_profiled("allgather")
    def allgather(self, output_tensors: list[list[Tensor]], input_tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        """``output_tensors[0][q]`` receives rank q's input (torch's layout: one list per input)."""
        _single(input_tensors, "allgather")
        if len(output_tensors) != 1:
            raise ValueError(f"allgather: {len(output_tensors)} output lists for 1 input")
        return self._allgather_per_input(output_tensors, input_tensors, opts, output_tensors)

    @_profiled("allgather_coalesced")
    def allgather_coalesced(
        self, output_lists: list[list[Tensor]], input_tensors: list[Tensor], opts: Any = None
    ) -> ShoalWork:
        """``output_lists[q][i]`` receives rank q's input i: torch's (and Gloo's)
        layout for ``all_gather_coalesced``, one list per rank, which is the
        transpose of ``allgather``'s one list per input."""
        if len(output_lists) != self._size:
            raise ValueError(
                f"all_gather_coalesced: output_tensor_lists must hold {self._size} lists (one per rank), "
                f"got {len(output_lists)}"
            )
        for q, outs in enumerate(output_lists):
            if len(outs) != len(input_tensors):
                raise ValueError(
                    f"all_gather_coalesced: output list {q} holds {len(outs)} tensors for {len(input_tensors)} inputs"
                )
        per_input = [[output_lists[q][i] for q in range(self._size)] for i in range(len(input_tensors))]
        return self._allgather_per_input(per_input, input_tensors, opts, output_lists)

    def _allgather_per_input(
        self, output_lists: list[list[Tensor]], input_tensors: list[Tensor], opts: Any, result: Any
    ) -> ShoalWork:
        """For each input i, every rank's copy into ``output_lists[i]`` (one tensor per rank)."""
        # Output q may have its own size (rank q's input): per-rank counts then.
        counts = [self._varied_list(outs, t, "allgather output") for outs, t in zip(output_lists, input_tensors)]
        ins = [_host(t) for t in input_tensors]
        flats = [_staging(t, sum(c) if c else self._size * t.numel()) for t, c in zip(input_tensors, counts)]

        def issue(calls: _Calls) -> None:
            for b, flat, c in zip(ins, flats, counts):
                out = _flat_host(flat).array
                c = None if c is None else [k * _per_element(b.host) for k in c]
                calls.add(self._group.allgather(b.array, out, dtype=b.dtype, async_op=calls.async_op, counts=c))

        def finish() -> None:
            for flat, outs in zip(flats, output_lists):
                _unpack(flat, outs)

        return self._launch(opts, result, issue, finish)

    @_profiled("all_gather_single")
    def all_gather_single(self, output: Tensor, input: Tensor, opts: Any = None) -> ShoalWork:  # noqa: A002
        """``all_gather_into_tensor``: every rank's ``input`` concatenated into ``output``."""
        return self.all_gather_single_coalesced([output], [input], opts)

    @_profiled("all_gather_single_coalesced")
    def all_gather_single_coalesced(self, outputs: list[Tensor], inputs: list[Tensor], opts: Any = None) -> ShoalWork:
        for o, i in zip(outputs, inputs):
            _check_numel(o, self._size * i.numel(), "all_gather_into_tensor output")
            _same_dtype(o, i, "all_gather_into_tensor")
        if _cuda.takes([*outputs, *inputs]):
            return self._track(_cuda.all_gather_into_tensor(self._group, outputs, inputs))
        ins = [_host(t) for t in inputs]
        outs = [_host(t, fill=False) for t in outputs]

        def issue(calls: _Calls) -> None:
            for i, o in zip(ins, outs):
                calls.add(self._group.allgather(i.array, o.array, dtype=i.dtype, async_op=calls.async_op))

        return self._launch(opts, outputs, issue, _copy_back(outs))

    # -- reduce_scatter ------------------------------------------------------

    @_profiled("reduce_scatter")
    def reduce_scatter(
        self, output_tensors: list[Tensor], input_tensors: list[list[Tensor]], opts: Any = None
    ) -> ShoalWork:
        _single(output_tensors, "reduce_scatter")
        out_t = output_tensors[0]
        # Input q may have its own size (rank q's output): per-rank counts then.
        counts = self._varied_list(input_tensors[0], out_t, "reduce_scatter input")
        op = _reduction_for(out_t.dtype, _op_name(_compat.reduce_op(opts)))
        flat = _host(_pack(input_tensors[0]), reduce=True)
        out = _host(out_t, reduce=True, fill=False)
        if counts is not None:
            counts = [k * _per_element(out.host) for k in counts]

        def issue(calls: _Calls) -> None:
            calls.add(
                self._group.reduce_scatter(
                    flat.array, out.array, op, dtype=out.dtype, async_op=calls.async_op, counts=counts
                )
            )

        return self._launch(opts, output_tensors, issue, _copy_back([out]))

    @_profiled("reduce_scatter_single")
    def reduce_scatter_single(self, output: Tensor, input: Tensor, opts: Any = None) -> ShoalWork:  # noqa: A002
        """``reduce_scatter_tensor``: block r of the reduced ``input`` into rank r's ``output``."""
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    @_profiled("reduce_scatter_single_coalesced")
    def reduce_scatter_single_coalesced(
        self, outputs: list[Tensor], inputs: list[Tensor], opts: Any = None
    ) -> ShoalWork:
        op = _op_name(_compat.reduce_op(opts))
        for o, i in zip(outputs, inputs):
            _check_numel(i, self._size * o.numel(), "reduce_scatter_tensor input")
            _same_dtype(o, i, "reduce_scatter_tensor")
        ops = [_reduction_for(t.dtype, op) for t in outputs]
        if _cuda.takes([*outputs, *inputs], reduce=True):
            return self._track(_cuda.reduce_scatter_tensor(self._group, outputs, inputs, ops))
        ins = [_host(t, reduce=True) for t in inputs]
        outs = [_host(t, reduce=True, fill=False) for t in outputs]

        def issue(calls: _Calls) -> None:
            for i, o, shoal_op in zip(ins, outs, ops):
                calls.add(
                    self._group.reduce_scatter(i.array, o.array, shoal_op, dtype=o.dtype, async_op=calls.async_op)
                )

        return self._launch(opts, outputs, issue, _copy_back(outs))

    # -- alltoall ------------------------------------------------------------

    @_profiled("alltoall")
    def alltoall(self, output_tensors: list[Tensor], input_tensors: list[Tensor], opts: Any = None) -> ShoalWork:
        """Input q goes to rank q; output q came from rank q (sizes may differ per pair)."""
        n = self._size
        if len(input_tensors) != n or len(output_tensors) != n:
            raise ValueError(f"alltoall needs {n} input and {n} output tensors")
        sends = [t.reshape(-1) for t in input_tensors]
        issue, finish = self._varied_alltoall(
            sends, [t.numel() for t in output_tensors], lambda parts: _copy_parts(parts, output_tensors)
        )
        return self._launch(opts, output_tensors, issue, finish)

    @_profiled("all_to_all_single")
    def all_to_all_single(
        self,
        output: Tensor,
        input: Tensor,  # noqa: A002
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> ShoalWork:
        """Rows of ``input`` split by ``input_split_sizes`` (even when empty) go to the ranks in order."""
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
        issue, finish = self._varied_alltoall(sends, out_counts, lambda parts: _copy_into_rows(parts, output))
        return self._launch(opts, [output], issue, finish)

    def _even_alltoall(self, output: Tensor, input: Tensor, opts: Any) -> ShoalWork:  # noqa: A002
        if _cuda.takes([output, input]):
            return self._track(_cuda.all_to_all(self._group, output, input))
        i, o = _host(input), _host(output, fill=False)

        def issue(calls: _Calls) -> None:
            calls.add(self._group.alltoall(i.array, o.array, dtype=i.dtype, async_op=calls.async_op))

        return self._launch(opts, [output], issue, _copy_back([o]))

    def _varied_alltoall(
        self, sends: list[Tensor], recv_counts: list[int], deliver: Callable[[list[Tensor]], None]
    ) -> tuple[Callable[[_Calls], None], Callable[[], None]]:
        """An alltoall of blocks of different sizes: shoal's alltoall with per-rank
        counts, the blocks back to back, nothing padded."""
        flat_in = _pack(sends)
        flat_out = _staging(flat_in, sum(recv_counts))
        scale = _per_element(flat_in)

        def issue(calls: _Calls) -> None:
            i, o = _flat_host(flat_in), _flat_host(flat_out)
            calls.add(
                self._group.alltoall(
                    i.array,
                    o.array,
                    dtype=i.dtype,
                    async_op=calls.async_op,
                    send_counts=[s.numel() * scale for s in sends],
                    recv_counts=[k * scale for k in recv_counts],
                )
            )

        def finish() -> None:
            deliver(list(flat_out.split(recv_counts)))

        return issue, finish

    # -- barrier and point-to-point ------------------------------------------

    @_profiled("barrier")
    def barrier(self, opts: Any = None) -> ShoalWork:

        def issue(calls: _Calls) -> None:
            calls.add(self._group.barrier(async_op=calls.async_op))

        return self._launch(opts, [], issue)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """Gloo's ``monitored_barrier``: rank 0 waits for each other rank in
        turn, within ``timeout`` of the start, and raises naming the first rank
        that did not arrive (every such rank with ``wait_all_ranks``); then it
        lets the others go, which wait for it as long. The ranks meet through
        torch's store (not shoal's transport), so that a rank that never comes
        leaves nothing pending in the communicator."""
        seconds = _seconds(timeout) if timeout is not None else self._group.timeout
        self._monitored += 1
        if self._size == 1:
            return
        if self._store is None:
            raise RuntimeError("monitored_barrier: this group has no store")
        _monitored_barrier(
            self._store, f"shoal/monitored/{self._monitored}", self._rank, self._size, seconds, wait_all_ranks
        )

    @_profiled("send")
    def send(self, tensors: list[Tensor], dst: int, tag: int) -> ShoalWork:
        """Sends right away: shoal's sends do not wait for the receiver (it buffers
        messages that arrive before their receive), so isend + irecv exchanges work."""
        b = self._p2p_buffer(tensors, dst, "send", fill=True)
        future = Future()
        _pipeline.wait_until_issued()
        _complete(future, tensors, lambda: self._group.send(b.array, dst, tag, dtype=b.dtype))
        return self._track(ShoalWork(future))

    def recv(self, tensors: list[Tensor], src: int, tag: int) -> ShoalWork:
        """Posts a receive; it runs when its work, or a later receive's, is waited for (in issue order)."""
        op = _PendingRecv(self._p2p_buffer(tensors, src, "recv", fill=False), src, tag, Future())
        return self._post_recv(op)

    def _post_recv(self, op: _PendingRecv) -> ShoalWork:
        with self._recv_lock:
            self._recvs.append(op)
        return self._track(ShoalWork(op.future, before_wait=lambda: self._run_recvs_until(op), source=op.source_rank))

    def _p2p_buffer(self, tensors: list[Tensor], peer: int, what: str, fill: bool) -> _Host:
        _single(tensors, what)
        if not 0 <= peer < self._size or peer == self._rank:
            raise ValueError(f"{what}: peer {peer} must be another rank of this group of {self._size}")
        return _host(tensors[0], fill=fill)

    def _run_recvs_until(self, target: _PendingRecv) -> None:
        with self._recv_lock:
            while not target.future.done():
                op = self._recvs.popleft()
                _complete(op.future, [op.buf.user], lambda op=op: self._receive(op))  # type: ignore[misc]

    def _receive(self, op: _PendingRecv) -> None:
        _pipeline.wait_until_issued()
        if op.src is None:
            self._receive_any(op)
        else:
            self._receive_from(op)
        op.buf.copy_back()

    @_profiled("recv")
    def _receive_from(self, op: _PendingRecv) -> None:
        assert op.src is not None
        self._group.recv(op.buf.array, op.src, op.tag, dtype=op.buf.dtype)
        op.source = op.src

    @_profiled("recvAnySource")
    def _receive_any(self, op: _PendingRecv) -> None:
        _, op.source = self._group.recv(op.buf.array, None, op.tag, dtype=op.buf.dtype)

    def recv_anysource(self, tensors: list[Tensor], tag: int) -> ShoalWork:
        """Posts a receive of the first message with ``tag`` from any rank (shoal's
        ``recv`` without ``src``); its work's ``_source_rank()`` names the sender."""
        _single(tensors, "recv")
        if self._size < 2:
            raise ValueError("recv from any source: this group has no other rank")
        return self._post_recv(_PendingRecv(_host(tensors[0], fill=False), None, tag, Future()))

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

    # -- names other torch releases use --------------------------------------

    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced
    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced
    alltoall_base = all_to_all_single
    # torch's Python code calls these bindings; on releases whose C++ side sends
    # them to the C++ backend (which a Python group has none of) they would fail
    _start_coalescing = start_coalescing
    _end_coalescing = end_coalescing

    # -- checks --------------------------------------------------------------

    def _varied_list(self, tensors: list[Tensor], mine: Tensor, what: str) -> list[int] | None:
        """One tensor per rank of ``mine``'s dtype, this rank's the size of ``mine``:
        their sizes as per-rank counts when they differ, None when all are alike."""
        if len(tensors) != self._size:
            raise ValueError(f"{what} must hold {self._size} tensors (one per rank), got {len(tensors)}")
        for t in tensors:
            if t.dtype != mine.dtype:
                raise ValueError(f"{what}: every tensor must be of {mine.dtype}, got {t.dtype}")
        if tensors[self._rank].numel() != mine.numel():
            raise ValueError(
                f"{what}: this rank's tensor must have {mine.numel()} elements, got {tensors[self._rank].numel()}"
            )
        counts = [t.numel() for t in tensors]
        return None if len(set(counts)) == 1 else counts

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
# monitored_barrier


def _seconds(timeout: Any) -> float:
    return float(timeout.total_seconds()) if hasattr(timeout, "total_seconds") else float(timeout)


def _monitored_barrier(store: dist.Store, key: str, rank: int, size: int, seconds: float, wait_all: bool) -> None:
    """One monitored barrier through ``store`` (the messages are Gloo's)."""
    from datetime import timedelta

    ms = int(seconds * 1000)
    if rank != 0:
        store.set(f"{key}/arrived/{rank}", b"1")
        try:
            store.wait([f"{key}/go"], timedelta(seconds=seconds))
        except Exception as e:  # noqa: BLE001 - torch's store raises its own types
            raise RuntimeError(
                f"Rank {rank} successfully reached monitoredBarrier, but received errors while waiting "
                f"for send/recv from rank 0. Please check rank 0 logs for faulty rank. ({e})"
            ) from e
        return
    start = time.monotonic()
    arrived: list[int] = []
    missing: list[int] = []
    for q in range(1, size):
        left = seconds - (time.monotonic() - start)
        if not wait_all and left <= 0:
            raise RuntimeError(
                f"Rank 0 timed out in monitoredBarrier after {ms} ms. Successfully processed ranks: "
                f"{', '.join(map(str, arrived))}"
            )
        try:
            # with wait_all_ranks every rank gets the whole timeout (as Gloo): one
            # that never comes must not use up the others' time
            store.wait([f"{key}/arrived/{q}"], timedelta(seconds=max(seconds if wait_all else left, 0.001)))
            arrived.append(q)
        except Exception as e:  # noqa: BLE001 - torch's store raises its own types
            if not wait_all:
                raise RuntimeError(f"[Rank 0]: Rank {q} failed to pass monitoredBarrier in {ms} ms") from e
            missing.append(q)
    if missing:
        raise RuntimeError(f"[Rank 0]: Ranks {', '.join(map(str, missing))} failed to pass monitoredBarrier in {ms} ms")
    store.set(f"{key}/go", b"1")


# ---------------------------------------------------------------------------
# The group's backend for each device type


class _DeviceBackend(_compat.BACKEND_BASE):
    """What torch finds as the group's backend for a device type
    (``group._get_backend(device)``, ``_device_types``): every call goes to
    the group (held weakly: the group holds this backend)."""

    def __init__(self, pg: ShoalProcessGroup) -> None:
        super().__init__(pg.rank(), pg.size())
        self._pg = weakref.ref(pg)

    def _group(self) -> ShoalProcessGroup:
        pg = self._pg()
        if pg is None:
            raise RuntimeError("the shoal process group of this backend was destroyed")
        return pg

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND


def _forward(name: str, to: str) -> Callable[..., Any]:
    def call(self: _DeviceBackend, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._group(), to)(*args, **kwargs)

    call.__name__ = name
    return call


for _name, _to in {
    "broadcast": "broadcast",
    "allreduce": "allreduce",
    "allreduce_sparse": "allreduce",
    "allreduce_coalesced": "allreduce_coalesced",
    "reduce": "reduce",
    "allgather": "allgather",
    "all_gather_single": "all_gather_single",
    "_allgather_base": "all_gather_single",
    "allgather_coalesced": "allgather_coalesced",
    "all_gather_single_coalesced": "all_gather_single_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_single_coalesced",
    "gather": "gather",
    "scatter": "scatter",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter_single",
    "_reduce_scatter_base": "reduce_scatter_single",
    "reduce_scatter_single_coalesced": "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_single_coalesced",
    "all_to_all_single": "all_to_all_single",
    "alltoall_base": "all_to_all_single",
    "alltoall": "alltoall",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv_anysource",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "start_coalescing": "start_coalescing",
    "end_coalescing": "end_coalescing",
}.items():
    setattr(_DeviceBackend, _name, _forward(_name, _to))


# ---------------------------------------------------------------------------
# Checks


def _single(tensors: list[Tensor], what: str) -> None:
    if len(tensors) != 1:
        raise ValueError(f"the shoal backend's {what} takes exactly one tensor per process, got {len(tensors)}")


def _check_numel(t: Tensor, numel: int, what: str) -> None:
    if t.numel() != numel:
        raise ValueError(f"{what} must have {numel} elements, got {t.numel()}")


def _same_dtype(a: Tensor, b: Tensor, what: str) -> None:
    if a.dtype != b.dtype:
        raise ValueError(f"{what}: input and output must have the same dtype, got {b.dtype} and {a.dtype}")


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
