"""shoal side of the benchmark loop; run under ``shoal run -n N``."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, cast

import numpy as np

import shoal
from shoal._types import CollectiveName, DTypeName, ReduceOpName
from shoal.bench import check, shoal_algorithms
from shoal.bench.worker import Backend, Unsupported, parse_spec, run


class ShoalBackend(Backend):
    library = "shoal"

    def __init__(self) -> None:
        self.group = shoal.init()
        self.rank = self.group.rank
        self.size = self.group.size

    def info(self) -> dict[str, Any]:
        transport = os.environ.get("SHOAL_TRANSPORT", "auto")
        if transport == "ucx":  # which UCX path ran is what the figure means
            transport += f" (UCX_TLS={os.environ.get('UCX_TLS', 'all')})"
        return {"version": shoal.__version__, "transport": transport}

    def make_call(
        self, lay: check.Layout, inp: np.ndarray, out: np.ndarray | None, op: str, root: int, algo: str | None
    ) -> Callable[[], object]:
        coll = lay.collective
        if algo is not None and algo not in shoal_algorithms(coll):
            raise Unsupported(f"shoal has no {coll} algorithm {algo!r}")
        # the spec's names were checked when it was parsed
        dt: DTypeName | None = "bfloat16" if lay.dtype == "bfloat16" else None
        op_name = cast(ReduceOpName, op)
        g = self.group
        # The in-place collectives as a user calls them: keywords only where
        # given (a native method's keywords cost CPython a dict per call).
        if coll == "allreduce" and algo is None and dt is None:
            return lambda: g.allreduce(inp, op_name)
        if coll == "broadcast" and algo is None and dt is None:
            return lambda: g.broadcast(inp, root)
        if coll == "reduce" and algo is None and dt is None:
            return lambda: g.reduce(inp, root, op_name)
        if coll == "allreduce":
            return lambda: g.allreduce(inp, op_name, algorithm=algo, dtype=dt)
        if coll == "broadcast":
            return lambda: g.broadcast(inp, root, algorithm=algo, dtype=dt)
        if coll == "reduce":
            return lambda: g.reduce(inp, root, op_name, algorithm=algo, dtype=dt)
        if coll == "allgather":
            return lambda: g.allgather(inp, out, algorithm=algo, dtype=dt)
        if coll == "reduce_scatter":
            return lambda: g.reduce_scatter(inp, out, op_name, algorithm=algo, dtype=dt)
        if coll == "alltoall":
            return lambda: g.alltoall(inp, out, algorithm=algo, dtype=dt)
        raise Unsupported(f"unknown collective {coll!r}")

    def algorithm(self, lay: check.Layout, algo: str | None, root: int) -> str | None:
        if algo is not None:
            return algo
        # the selector's count is per rank's block for the blocked collectives
        count = lay.block if lay.collective in check.BLOCKED else lay.count
        return self.group.choose_algorithm(
            cast(CollectiveName, lay.collective), count, cast(DTypeName, lay.dtype), root
        )

    def barrier(self) -> None:
        self.group.barrier()

    def allreduce_f64(self, arr: np.ndarray, op: str) -> None:
        self.group.allreduce(arr, cast(ReduceOpName, op))

    def close(self) -> None:
        shoal.finalize()


def main(argv: list[str] | None = None) -> int:
    spec = parse_spec(argv, "python -m shoal.bench.worker_shoal")
    return run(ShoalBackend(), spec)


if __name__ == "__main__":
    sys.exit(main())
