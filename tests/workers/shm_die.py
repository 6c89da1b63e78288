"""Rank `victim` dies (SIGKILL) in the middle of a series of shared-memory
allreduces (`algorithm` from argv, of `count` float32, default 65536); the
others must raise naming it, quickly."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import shoal

victim, algorithm = int(sys.argv[1]), sys.argv[2]
count = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 16
shoal.init()
r = shoal.rank()
x = np.ones(count, dtype=np.float32)
start = time.monotonic()
try:
    for i in range(10_000):
        if r == victim and i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        shoal.allreduce(x, algorithm=algorithm)
        x[:] = 1
except shoal.ShoalError as e:
    print(f"RAISED after {time.monotonic() - start:.2f}s: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
print("NO ERROR", flush=True)
