"""Ranks call collectives that differ in `what` (kind, count, dtype, op or
root); every rank must raise an error that says so, not hang."""

from __future__ import annotations

import sys

import numpy as np

import shoal

what = sys.argv[1]
try:
    # a fast rank may reach the mismatch while a slow one is still in init's
    # calibration; the slow one then raises there, which is right too
    shoal.init()
    r, p = shoal.rank(), shoal.size()
    odd = r == p - 1
    x = np.ones(1000, dtype=np.float32)
    if what == "kind":
        shoal.broadcast(x) if odd else shoal.allreduce(x)
    elif what == "count":
        shoal.allreduce(np.ones(999 if odd else 1000, dtype=np.float32))
    elif what == "dtype":
        shoal.allreduce(np.ones(1000, dtype=np.int32 if odd else np.float32))
    elif what == "op":
        shoal.allreduce(x, op="max" if odd else "sum")
    elif what == "root":
        shoal.broadcast(x, root=1 if odd else 0)
    shoal.barrier()
except shoal.ShoalError as e:
    print(f"RAISED {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
print("NO ERROR", flush=True)
