"""Joins the job and runs one allreduce; prints how it ended, so a test can
check that a failed transport setup fails quickly and names its cause."""

from __future__ import annotations

import sys
import time

import numpy as np

import shoal

start = time.monotonic()
try:
    shoal.init()
    x = np.ones(1000, dtype=np.float32)
    shoal.allreduce(x)
except shoal.ShoalError as e:
    print(f"RAISED after {time.monotonic() - start:.2f}s: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
print(f"OK {x[0]:g}", flush=True)
