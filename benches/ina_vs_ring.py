"""In-network vs ring allreduce on the current job (needs SHOAL_SWITCH):

    shoal switch --listen 127.0.0.1:9800 &
    SHOAL_SWITCH=127.0.0.1:9800 shoal run -n 4 python benches/ina_vs_ring.py [sizes in bytes...]

Prints the median time of each per size, and their ratio.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import shoal


def median_time(x: np.ndarray, algorithm: str, iters: int) -> float:
    samples = []
    for _ in range(iters):
        shoal.barrier()
        t0 = time.perf_counter()
        shoal.allreduce(x, algorithm=algorithm)
        samples.append(time.perf_counter() - t0)
    arr = np.array(samples)
    shoal.allreduce(arr, op="max")  # a call takes as long as its slowest rank
    return statistics.median(arr.tolist())


def main() -> None:
    sizes = [int(s) for s in sys.argv[1:]] or [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    shoal.init()
    if shoal.rank() == 0:
        print(f"{'bytes':>10} {'ina ms':>9} {'ring ms':>9} {'ina GB/s':>9} {'ring/ina':>8}", flush=True)
    for nbytes in sizes:
        x = np.ones(nbytes // 4, dtype=np.float32)
        iters = 5 if nbytes >= 16 << 20 else 10
        median_time(x, "ina", 1)
        median_time(x, "ring", 1)
        t_ina, t_ring = median_time(x, "ina", iters), median_time(x, "ring", iters)
        if shoal.rank() == 0:
            print(f"{nbytes:>10} {t_ina * 1e3:9.1f} {t_ring * 1e3:9.1f} {nbytes / t_ina / 1e9:9.3f} "
                  f"{t_ring / t_ina:8.2f}", flush=True)
    shoal.finalize()


if __name__ == "__main__":
    main()
