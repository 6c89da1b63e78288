"""Rank `victim` stops (SIGSTOP) in the middle of a ring allreduce; every
other rank must raise once SHOAL_TIMEOUT passes, naming the stopped rank
(not merely the neighbour it waits on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np

import shoal

victim, kill_after = int(sys.argv[1]), float(sys.argv[2])
shoal.init()
r = shoal.rank()
x = np.ones(1 << 20, dtype=np.float32)
start = time.monotonic()
try:
    for i in range(10_000):
        if r == victim and i == 5:
            # Nobody could ever continue a stopped rank: a watchdog kills it
            # once the others had their time to report it.
            subprocess.Popen(["sh", "-c", f"sleep {kill_after}; kill -9 {os.getpid()}"])
            work = shoal.allreduce(x, algorithm="ring", async_op=True)
            time.sleep(0.002)  # the worker thread is inside the ring now
            os.kill(os.getpid(), signal.SIGSTOP)
        shoal.allreduce(x, algorithm="ring")
        x[:] = 1
except (shoal.ShoalError, shoal.ShoalTimeoutError) as e:
    print(f"RAISED after {time.monotonic() - start:.2f}s: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
print("NO ERROR", flush=True)
