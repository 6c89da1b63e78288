"""Gloo side of the benchmark loop: torch.distributed's ``gloo`` backend on CPU
tensors that share memory with the loop's numpy buffers (``torch.from_numpy``).
Started as N processes with torchrun's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and ``init_method="env://"``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from shoal.bench import check
from shoal.bench.worker import Backend, Unsupported, parse_spec, run


class GlooBackend(Backend):
    library = "gloo"

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        torch.set_num_threads(1)  # ranks share the cores; gloo does its own reductions
        dist.init_process_group("gloo", init_method="env://")
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.ops = {
            "sum": dist.ReduceOp.SUM,
            "prod": dist.ReduceOp.PRODUCT,
            "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX,
        }

    def info(self) -> dict[str, Any]:
        return {"version": self.torch.__version__, "transport": "tcp (gloo)"}

    def tensor(self, arr: np.ndarray, dtype: str) -> Any:
        if dtype == "bfloat16":  # numpy has no bfloat16: same bits, reinterpreted
            return self.torch.from_numpy(arr.view(np.int16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(arr)

    def make_call(
        self, lay: check.Layout, inp: np.ndarray, out: np.ndarray | None, op: str, root: int, algo: str | None
    ) -> Callable[[], object]:
        dist, coll, n = self.dist, lay.collective, self.size
        rop = self.ops[op]
        t_in = self.tensor(inp, lay.dtype)
        t_out = None if out is None else self.tensor(out, lay.dtype)
        if coll == "allreduce":
            return lambda: dist.all_reduce(t_in, op=rop)
        if coll == "broadcast":
            return lambda: dist.broadcast(t_in, src=root)
        if coll == "reduce":
            return lambda: dist.reduce(t_in, dst=root, op=rop)
        if coll == "alltoall":
            return lambda: dist.all_to_all_single(t_out, t_in)
        if coll == "allgather":
            whole = lambda: dist.all_gather_into_tensor(t_out, t_in)  # noqa: E731
            assert t_out is not None, "allgather has an output"
            chunks = list(t_out.chunk(n))
            listed = lambda: dist.all_gather(chunks, t_in)  # noqa: E731
            return self._first_supported(coll, [whole, listed])
        if coll == "reduce_scatter":
            whole = lambda: dist.reduce_scatter_tensor(t_out, t_in, op=rop)  # noqa: E731
            chunks = list(t_in.chunk(n))
            listed = lambda: dist.reduce_scatter(t_out, chunks, op=rop)  # noqa: E731
            return self._first_supported(coll, [whole, listed])
        raise Unsupported(f"unknown collective {coll!r}")

    def _first_supported(self, coll: str, calls: list[Callable[[], object]]) -> Callable[[], object]:
        """The first form of the call this torch's Gloo accepts (they fail locally, alike on every rank)."""
        reasons = []
        for call in calls:
            try:
                call()
                return call
            except (RuntimeError, NotImplementedError, ValueError) as e:
                reasons.append(str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise Unsupported(f"torch {self.torch.__version__} Gloo: {coll} unsupported ({'; '.join(reasons)})")

    def algorithm(self, lay: check.Layout, algo: str | None, root: int) -> str | None:
        return None

    def barrier(self) -> None:
        self.dist.barrier()

    def allreduce_f64(self, arr: np.ndarray, op: str) -> None:
        self.dist.all_reduce(self.torch.from_numpy(arr), op=self.ops[op])

    def close(self) -> None:
        self.dist.barrier()
        self.dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    spec = parse_spec(argv, "python -m shoal.bench.worker_gloo")
    return run(GlooBackend(), spec)


if __name__ == "__main__":
    sys.exit(main())
