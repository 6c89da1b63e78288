"""OpenMPI side of the benchmark loop, through mpi4py on the loop's numpy
buffers (no copies); started by ``mpirun -n N``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from shoal.bench import check
from shoal.bench.worker import Backend, Unsupported, parse_spec, run


class MpiBackend(Backend):
    library = "mpi"

    def __init__(self) -> None:
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.types = {
            "float32": MPI.FLOAT,
            "float64": MPI.DOUBLE,
            "int8": MPI.INT8_T,
            "uint8": MPI.UINT8_T,
            "int32": MPI.INT32_T,
            "int64": MPI.INT64_T,
        }
        self.ops = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}

    def info(self) -> dict[str, Any]:
        import mpi4py

        lib = self.MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0]
        return {"version": lib, "mpi4py": mpi4py.__version__, "transport": "OpenMPI default (shared memory)"}

    def make_call(
        self, lay: check.Layout, inp: np.ndarray, out: np.ndarray | None, op: str, root: int, algo: str | None
    ) -> Callable[[], object]:
        if lay.dtype not in self.types:
            raise Unsupported(f"MPI has no standard {lay.dtype} type")
        comm, coll, mt, mop = self.comm, lay.collective, self.types[lay.dtype], self.ops[op]
        IN_PLACE = self.MPI.IN_PLACE
        b_in = [inp, mt]
        b_out = None if out is None else [out, mt]
        if coll == "allreduce":
            return lambda: comm.Allreduce(IN_PLACE, b_in, mop)
        if coll == "broadcast":
            return lambda: comm.Bcast(b_in, root)
        if coll == "reduce":
            if self.rank == root:
                return lambda: comm.Reduce(IN_PLACE, b_in, mop, root)
            return lambda: comm.Reduce(b_in, None, mop, root)
        if coll == "allgather":
            return lambda: comm.Allgather(b_in, b_out)
        if coll == "reduce_scatter":
            return lambda: comm.Reduce_scatter_block(b_in, b_out, mop)
        if coll == "alltoall":
            return lambda: comm.Alltoall(b_in, b_out)
        raise Unsupported(f"unknown collective {coll!r}")

    def algorithm(self, lay: check.Layout, algo: str | None, root: int) -> str | None:
        return None

    def barrier(self) -> None:
        self.comm.Barrier()

    def allreduce_f64(self, arr: np.ndarray, op: str) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, [arr, self.MPI.DOUBLE], self.ops[op])


def main(argv: list[str] | None = None) -> int:
    spec = parse_spec(argv, "python -m shoal.bench.worker_mpi")
    return run(MpiBackend(), spec)


if __name__ == "__main__":
    sys.exit(main())
