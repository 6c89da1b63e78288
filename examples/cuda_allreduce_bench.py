"""all_reduce of CUDA tensors on the shoal and Gloo torch.distributed backends.

    python examples/cuda_allreduce_bench.py                  # 2 and 4 ranks, 25 and 100 MB, shoal and gloo
    python examples/cuda_allreduce_bench.py --ranks 2 --sizes-mb 25 --iters 50
    python examples/cuda_allreduce_bench.py --device cpu     # the same on CPU tensors
    python examples/cuda_allreduce_bench.py --backends shoal,shoal:shm_sharded,gloo   # a host algorithm forced

A backend ``shoal:ALGO`` is shoal with ``SHOAL_ALGO=allreduce:ALGO``: the
host algorithm that reduces each chunk, forced, timed in the same rounds as
the others.

Without ``RANK`` in the environment it is the driver: for each rank count it
starts the job once per backend with ``shoal run`` (ranks share the GPUs
round-robin: rank r uses GPU r % device_count), alternating the backends
``--rounds`` times, and prints a table of median milliseconds per
all_reduce (each figure: rank 0's median over ``--iters`` timed calls, the
ranks lined up by a barrier before each call, a call timed until the GPU
has the result) and the speedup of shoal over Gloo. Each job checks its
result.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="2,4", help="comma-separated rank counts (default 2,4)")
    p.add_argument("--sizes-mb", default="25,100", help="comma-separated tensor sizes in MB (float32; default 25,100)")
    p.add_argument(
        "--backends",
        default="shoal,gloo",
        help="comma-separated backends: shoal, shoal:ALGO, gloo (default shoal,gloo)",
    )
    p.add_argument("--iters", type=int, default=20, help="timed calls per size (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls per size first (default 3)")
    p.add_argument("--rounds", type=int, default=1, help="times each job runs, backends alternating (default 1)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="where the tensors live (default cuda)")
    return p.parse_args()


def numbers(text: str, kind: type = int) -> list:  # type: ignore[type-arg]
    return [kind(x) for x in text.split(",") if x]


# ---------------------------------------------------------------------------
# One rank of a job


def rank_main(args: argparse.Namespace, backend: str) -> None:
    import torch
    import torch.distributed as dist

    import shoal.torch  # noqa: F401  (registers the backend)

    dist.init_process_group(backend)
    r, n = dist.get_rank(), dist.get_world_size()
    cuda = args.device == "cuda"
    if cuda:
        device = torch.device("cuda", r % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    for mb in numbers(args.sizes_mb, float):
        x = torch.empty(int(mb * 1e6) // 4, device=device)
        times = []
        for i in range(args.warmup + args.iters):
            x.fill_(1.0)
            sync()
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            sync()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        if not torch.equal(x, torch.full_like(x, float(n))):
            raise SystemExit(f"rank {r}: wrong all_reduce result on {backend}")
        if r == 0:
            print(f"RESULT {mb:g} {statistics.median(times) * 1e3:.3f}", flush=True)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# The driver


def run_job(args: argparse.Namespace, ranks: int, backend: str) -> dict[float, float]:
    """Median ms per size of one job."""
    cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", str(ranks), "--", sys.executable, __file__]
    cmd += [f"--sizes-mb={args.sizes_mb}", f"--iters={args.iters}", f"--warmup={args.warmup}"]
    cmd += [f"--device={args.device}"]
    library, _, algorithm = backend.partition(":")
    env = {**os.environ, "BENCH_BACKEND": library}
    if algorithm:
        env["SHOAL_ALGO"] = f"allreduce:{algorithm}"
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{backend} on {ranks} ranks failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return {float(mb): float(ms) for mb, ms in re.findall(r"RESULT ([0-9.]+) ([0-9.]+)", proc.stdout)}


def driver(args: argparse.Namespace) -> None:
    backends = args.backends.split(",")
    print(f"all_reduce of float32 {args.device} tensors, median ms per call (lower is better)")
    shoals = [b for b in backends if b.partition(":")[0] == "shoal"]
    compared = shoals if "gloo" in backends else []
    width = max(9, *(len(b) for b in backends))
    header = f"{'ranks':>5} {'MB':>6} " + " ".join(f"{b:>{width}}" for b in backends)
    header += "".join(f"  {b + '/gloo speed':>{width + 12}}" for b in compared)
    print(header, flush=True)
    for ranks in numbers(args.ranks):
        runs: dict[str, list[dict[float, float]]] = {b: [] for b in backends}
        for _ in range(args.rounds):
            for b in backends:
                runs[b].append(run_job(args, ranks, b))
        for mb in numbers(args.sizes_mb, float):
            ms = {b: statistics.median(run[mb] for run in runs[b]) for b in backends}
            line = f"{ranks:>5} {mb:>6g} " + " ".join(f"{ms[b]:>{width}.2f}" for b in backends)
            line += "".join(f"  {ms['gloo'] / ms[b]:>{width + 11}.2f}x" for b in compared)
            print(line, flush=True)


def main() -> None:
    args = arguments()
    backend = os.environ.get("BENCH_BACKEND")
    if "RANK" in os.environ and backend:
        rank_main(args, backend)
    else:
        driver(args)


if __name__ == "__main__":
    main()
