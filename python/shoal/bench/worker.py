"""The benchmark loop every library's worker runs, identical for all of them.

For each size: allocate the buffers once; ``warmup`` untimed calls; then
``repeats`` times: a barrier, and ``iters`` back-to-back calls timed together
(one sample = elapsed / iters). Each sample becomes the maximum over ranks
(the slowest rank sets the pace of a collective). Timed calls run on
zero-filled buffers, so in-place reductions cannot overflow; afterwards one
call on patterned inputs is checked against the numpy reference (untimed),
and the number of wrong elements is summed over ranks.

Rank 0 writes one JSON line per size to stdout, prefixed with ``MARKER``.
The per-library workers (``worker_shoal``, ``worker_gloo``, ``worker_mpi``)
only implement :class:`Backend`: how to make a call, a barrier, and a
reduction of the timing samples.
"""

from __future__ import annotations

import argparse
import json
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


def time_samples(backend: Backend, call: Callable[[], object], iters: int, warmup: int, repeats: int) -> list[float]:
    """Seconds per call of each repeat, on this rank."""
    for _ in range(warmup):
        call()
    samples = []
    clock = time.perf_counter
    for _ in range(repeats):
        backend.barrier()
        t0 = clock()
        for _ in range(iters):
            call()
        samples.append((clock() - t0) / iters)
    return samples


def run(backend: Backend, spec: Spec) -> int:
    """Runs every size of ``spec``; returns the process exit code."""
    emit(
        backend,
        {"type": "start", "library": backend.library, "nranks": backend.size, "spec": asdict(spec), **backend.info()},
    )
    for nbytes in spec.sizes:
        lay = check.layout(spec.collective, nbytes, spec.dtype, backend.size)
        iters = spec.iters or auto_iters(lay.nbytes)
        warmup = spec.warmup if spec.warmup is not None else auto_warmup(iters)
        inp, out = check.allocate(lay)
        try:
            call = backend.make_call(lay, inp, out, spec.op, spec.root, spec.algo)
            samples = time_samples(backend, call, iters, warmup, spec.repeats)
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
            },
        )
        del inp, out, call
    emit(backend, {"type": "end"})
    backend.close()
    return 0


def parse_spec(argv: list[str] | None, prog: str) -> Spec:
    p = argparse.ArgumentParser(prog=prog, description="shoal bench worker (started by `shoal bench`)")
    p.add_argument("--spec", required=True, help="the benchmark Spec as JSON")
    ns = p.parse_args(argv)
    return Spec.from_json(ns.spec)
