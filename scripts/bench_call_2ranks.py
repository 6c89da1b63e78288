"""An 8-byte float32 allreduce between the ranks of a job, N times after a
warm-up of 1000: the call path with a peer to wait for. Rank 0 prints the
wall time per call (median of 5 rounds of N/5 calls) in microseconds.

Wall time and CPU per call, before and after a change (docs/benchmarks.md,
"The call path's cost"); CPU is the fairer figure on a loaded machine, as
the difference of two runs' process CPU (both ranks and the launcher):

    for n in 2000 22000; do
        SHOAL_TRANSPORT=shm perf stat -x, -e task-clock -o n$n.csv -- \\
            shoal run -n 2 --no-prefix -- python scripts/bench_call_2ranks.py $n
    done
    # CPU per call: (task-clock of n22000 - of n2000) / 20000
"""

import statistics
import sys
import time

import numpy as np

import shoal

g = shoal.init()
x = np.ones(2, dtype=np.float32)
for _ in range(1000):
    g.allreduce(x)
per_round = int(sys.argv[1]) // 5
rounds = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(per_round):
        g.allreduce(x)
    rounds.append((time.perf_counter() - start) / max(per_round, 1) * 1e6)
if g.rank == 0:
    print(f"us_per_call {statistics.median(rounds):.2f}")
shoal.finalize()
