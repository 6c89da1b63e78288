"""Runs one allreduce on float32 and prints, on rank 0, the algorithm the
selector chose for it (`chosen=<name>`), for tests/test_tune.py: the
SHOAL_TUNE_FILE of the job decides which."""

from __future__ import annotations

import numpy as np

import shoal

COUNT = 4096

shoal.init()
r, n = shoal.rank(), shoal.world_size()
x = np.full(COUNT, r + 1, dtype=np.float32)
shoal.allreduce(x)
assert np.all(x == n * (n + 1) / 2), x[:4]
chosen = shoal.world().choose_algorithm("allreduce", COUNT, "float32")
if r == 0:
    print(f"chosen={chosen}", flush=True)
shoal.finalize()
