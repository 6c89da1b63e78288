"""The benchmark loop every library's worker runs, identical for all of them.

For each size: allocate the buffers once; ``warmup`` untimed calls; then
``repeats`` times: a barrier, and ``iters`` back-to-back calls timed together
(one sample = elapsed / iters). Each sample becomes the maximum over ranks
(the slowest rank sets the pace of a collective). Timed calls run on
zero-filled buffers, so in-place reductions cannot overflow; afterwards one
call on patterned inputs is checked against the numpy reference (untimed),
and the number of wrong elements is summed over ranks.

Rank 0 writes one JSON line per size to stdout, prefixed with ``MARKER``.
With a ``gate`` (a FIFO that ``shoal bench`` writes), the bench keeps every
job alive and gives them turns, one repeat each: every rank reads one byte
from the gate before each repeat (the first turn of a size also runs its
warm-up; the last also checks and reports it), and rank 0 reports the end of
each other turn with a ``turn`` record, after a barrier. So competitors
measure each size within milliseconds of each other.
The per-library workers (``worker_shoal``, ``worker_gloo``, ``worker_mpi``)
only implement :class:`Backend`: how to make a call, a barrier, and a
reduction of the timing samples.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from shoal.bench import check

MARKER = "@@shoal-bench "


@dataclass
class Spec:
    """What to run; the same JSON goes to every library's workers."""

    collective: str
    sizes: list[int]
    dtype: str = "float32"
    op: str = "sum"
    iters: int | None = None  # None: auto_iters(size)
    warmup: int | None = None  # None: auto_warmup(iters)
    repeats: int = 5
    root: int = 0
    algo: str | None = None  # shoal only: a forced algorithm
    check: bool = True
    gate: str | None = None  # a FIFO: one byte per rank before each repeat (None: no turns)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Spec:
        return cls(**json.loads(text))


def auto_iters(nbytes: int) -> int:
    """Calls per timed sample: enough to average out timer and scheduling noise
    on small messages, few on large ones (each sample moves ~256 MiB)."""
    return int(min(200, max(5, (256 << 20) // max(nbytes, 1))))


def auto_warmup(iters: int) -> int:
    return int(min(20, max(2, iters // 5)))


class Unsupported(Exception):
    """The library cannot run this collective/dtype/op (raised alike on every rank)."""


class Backend:
    """One library's side of the loop."""

    library = "?"
    rank = 0
    size = 1

    def info(self) -> dict[str, Any]:
        """Versions and settings worth recording."""
        return {}

    def make_call(
        self, lay: check.Layout, inp: np.ndarray, out: np.ndarray | None, op: str, root: int, algo: str | None
    ) -> Callable[[], object]:
        """A zero-argument callable running the collective once on these buffers."""
        raise NotImplementedError

    def algorithm(self, lay: check.Layout, algo: str | None, root: int) -> str | None:
        """The algorithm the library uses for this call, when it can say."""
        return algo

    def barrier(self) -> None:
        raise NotImplementedError

    def allreduce_f64(self, arr: np.ndarray, op: str) -> None:
        """In-place ``op`` ("max" or "sum") over ranks of a float64 array."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def emit(backend: Backend, record: dict[str, Any]) -> None:
    if backend.rank == 0:
        sys.stdout.write(MARKER + json.dumps(record, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def time_samples(
    backend: Backend,
    call: Callable[[], object],
    iters: int,
    warmup: int,
    repeats: int,
    between: Callable[[], None] | None = None,
    spans: list[list[float]] | None = None,
) -> list[float]:
    """Seconds per call of each repeat, on this rank. `between` runs between
    two repeats (other jobs' turns); `spans` gets each repeat's wall-clock
    [start, end]."""
    for _ in range(warmup):
        call()
    samples = []
    clock = time.perf_counter
    for i in range(repeats):
        if i > 0 and between is not None:
            between()
        backend.barrier()
        wall = time.time()
        t0 = clock()
        for _ in range(iters):
            call()
        samples.append((clock() - t0) / iters)
        if spans is not None:
            spans.append([wall, time.time()])
    return samples


class BenchEnded(Exception):
    """The bench closed this job's gate before its turn came."""


class Gate:
    """The turns ``shoal bench`` gives this job: one byte per rank per turn.
    Blocking reads of a pipe, so a job waiting for its turn takes no CPU."""

    GO = b"g"

    def __init__(self, path: str | None) -> None:
        # (the bench holds the FIFO open for writing, so this open does not block)
        self.fd = os.open(path, os.O_RDONLY) if path else None

    @property
    def active(self) -> bool:
        return self.fd is not None

    def wait(self) -> None:
        """Returns when this rank's next turn has come; raises BenchEnded if
        the bench ended the job instead (its end of the pipe closed)."""
        if self.fd is not None and os.read(self.fd, 1) != self.GO:
            raise BenchEnded

    def pass_turn(self, backend: Backend) -> None:
        """Ends this job's turn between two repeats (once every rank is
        done: a barrier), and waits for its next one."""
        backend.barrier()
        emit(backend, {"type": "turn"})
        self.wait()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def run(backend: Backend, spec: Spec) -> int:
    """Runs every size of ``spec``; returns the process exit code."""
    emit(
        backend,
        {"type": "start", "library": backend.library, "nranks": backend.size, "spec": asdict(spec), **backend.info()},
    )
    gate = Gate(spec.gate)
    try:
        code = _run_sizes(backend, spec, gate)
    except BenchEnded:
        print(f"{backend.library} rank {backend.rank}: the bench ended the job before its turn", file=sys.stderr)
        code = 1
    finally:
        gate.close()
    if code == 0:
        emit(backend, {"type": "end"})
    backend.close()
    return code


def _run_sizes(backend: Backend, spec: Spec, gate: Gate) -> int:
    between = functools.partial(gate.pass_turn, backend) if gate.active else None
    for nbytes in spec.sizes:
        gate.wait()
        spans: list[list[float]] = []
        lay = check.layout(spec.collective, nbytes, spec.dtype, backend.size)
        iters = spec.iters or auto_iters(lay.nbytes)
        warmup = spec.warmup if spec.warmup is not None else auto_warmup(iters)
        inp, out = check.allocate(lay)
        try:
            call = backend.make_call(lay, inp, out, spec.op, spec.root, spec.algo)
            samples = time_samples(backend, call, iters, warmup, spec.repeats, between, spans)
        except Unsupported as e:
            emit(backend, {"type": "unsupported", "size": lay.nbytes, "reason": str(e)})
            break
        per_repeat = np.array(samples, dtype=np.float64)
        backend.allreduce_f64(per_repeat, "max")
        errors = np.zeros(1, dtype=np.float64)
        if spec.check:
            check.fill_for_check(lay, backend.rank, spec.op, spec.root, inp, out)
            backend.barrier()
            call()
            errors[0] = check.count_errors(lay, backend.rank, spec.op, spec.root, inp, out)
            backend.allreduce_f64(errors, "sum")
        times_us = [t * 1e6 for t in per_repeat.tolist()]
        emit(
            backend,
            {
                "type": "result",
                "size": lay.nbytes,
                "requested_size": nbytes,
                "count": lay.count,
                "iters": iters,
                "warmup": warmup,
                "samples_us": times_us,
                "time_us": statistics.median(times_us),
                "errors": int(errors[0]) if spec.check else None,
                "algo": backend.algorithm(lay, spec.algo, spec.root),
                # rank 0's wall clock: when each repeat ran, beside the other jobs'
                "repeats_unix": spans,
            },
        )
        del inp, out, call
    return 0


def parse_spec(argv: list[str] | None, prog: str) -> Spec:
    p = argparse.ArgumentParser(prog=prog, description="shoal bench worker (started by `shoal bench`)")
    p.add_argument("--spec", required=True, help="the benchmark Spec as JSON")
    ns = p.parse_args(argv)
    return Spec.from_json(ns.spec)
