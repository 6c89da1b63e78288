"""Quick allreduce timing: median over repeats, per size, on the current job.

    shoal run -n 4 python benches/allreduce_timing.py [sizes in bytes...]

The full side-by-side comparison with Gloo and OpenMPI is `shoal bench`
(its own issue); this is the core's sanity check of where time goes.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import shoal


def timed(x: np.ndarray, iters: int, algorithm: str | None) -> float:
    samples = []
    for _ in range(iters):
        shoal.barrier()
        t0 = time.perf_counter()
        shoal.allreduce(x, algorithm=algorithm)
        samples.append(time.perf_counter() - t0)
    # every rank's time is the slowest rank's: take the max across ranks per sample
    arr = np.array(samples, dtype=np.float64)
    shoal.allreduce(arr, op="max")
    return statistics.median(arr.tolist())


def main() -> None:
    sizes = [int(s) for s in sys.argv[1:]] or [8, 64 << 10, 16 << 20]
    algorithm = None
    shoal.init()
    for nbytes in sizes:
        x = np.ones(max(nbytes // 4, 1), dtype=np.float32)
        iters = 200 if nbytes <= 1 << 16 else 20
        timed(x, 5, algorithm)  # warm-up: plan cache, page faults
        t = timed(x, iters, algorithm)
        algo = shoal.world().choose_algorithm("allreduce", x.size)
        if shoal.rank() == 0:
            print(f"{nbytes:>10} B  {t * 1e6:10.1f} us  algbw {nbytes / t / 1e9:6.3f} GB/s  ({algo})", flush=True)
    shoal.finalize()


if __name__ == "__main__":
    main()
