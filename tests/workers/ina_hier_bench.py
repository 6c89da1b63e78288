"""Times allreduce with several algorithms side by side on emulated hosts
(SHOAL_HOST_ID per block of ranks), for docs/benchmarks.md:

    python tests/workers/ina_hier_bench.py HOSTS LOCAL SWITCH_ADDR [SIZES_MIB] [ALGOS] [REPEATS]

starts HOSTS x LOCAL ranks of itself; each repeat runs every algorithm once
per size, interleaved, timed as the slowest rank's time of one call (after
a barrier); rank 0 prints the median over the repeats per algorithm and size."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid

import numpy as np

import shoal


def launch(hosts: int, local: int, switch: str, rest: list[str]) -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {
        **os.environ,
        "SHOAL_SWITCH": switch,
        "WORLD_SIZE": str(hosts * local),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "SHOAL_JOB_ID": uuid.uuid4().hex,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", *rest],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r % local), "SHOAL_HOST_ID": f"host{r // local}"},
        )
        for r in range(hosts * local)
    ]
    return max(p.wait() for p in procs)


def time_one(x: np.ndarray, algo: str) -> float:
    shoal.barrier()
    start = time.perf_counter()
    shoal.allreduce(x, "sum", algorithm=algo)
    took = np.array([time.perf_counter() - start])
    shoal.allreduce(took, "max", algorithm="ring")
    return float(took[0])


def run(sizes_mib: list[int], algos: list[str], repeats: int) -> None:
    shoal.init()
    times: dict[tuple[str, int], list[float]] = {}
    bufs = {mib: np.ones(mib << 18, dtype=np.float32) for mib in sizes_mib}
    for mib in sizes_mib:
        for algo in algos:  # warm-up: plans, switch jobs, pages
            time_one(bufs[mib], algo)
    for _ in range(repeats):
        for mib in sizes_mib:
            for algo in algos:
                times.setdefault((algo, mib), []).append(time_one(bufs[mib], algo))
    if shoal.rank() == 0:
        auto = {mib: shoal.world().choose_algorithm("allreduce", mib << 18, "float32") for mib in sizes_mib}
        for mib in sizes_mib:
            row = "  ".join(f"{a}={statistics.median(times[(a, mib)]) * 1e3:.1f}ms" for a in algos)
            print(f"{mib} MiB: {row}  (auto picks {auto[mib]})", flush=True)
    shoal.finalize()


def main() -> None:
    if sys.argv[1] == "--rank":
        args = sys.argv[2:]
        sizes = [int(s) for s in args[0].split(",")]
        algos = args[1].split(",")
        run(sizes, algos, int(args[2]))
        return
    hosts, local, switch = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rest = [
        sys.argv[4] if len(sys.argv) > 4 else "4,16",
        sys.argv[5] if len(sys.argv) > 5 else "hierarchical,ina,hierarchical_ina",
        sys.argv[6] if len(sys.argv) > 6 else "7",
    ]
    sys.exit(launch(hosts, local, switch, rest))


if __name__ == "__main__":
    main()
