"""A small job for the store and rendezvous tests: `rounds` times (default 1)
init, one allreduce checked exactly, finalize. Prints `OK <round>` after each
round and `DONE` at the end; an init that fails prints `INIT <round> FAILED
after <s>s: <error>` and exits with code 3."""

from __future__ import annotations

import sys
import time

import numpy as np

import shoal

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
for i in range(rounds):
    start = time.monotonic()
    try:
        shoal.init()
    except Exception as e:  # any failure to join is what the tests look for
        print(f"INIT {i} FAILED after {time.monotonic() - start:.2f}s: {e}", flush=True)
        sys.exit(3)
    r, n = shoal.rank(), shoal.size()
    x = np.full(16, r + 1, dtype=np.float64)
    shoal.allreduce(x)
    assert np.all(x == n * (n + 1) / 2), (i, r, x)
    shoal.finalize()
    print(f"OK {i}", flush=True)
print("DONE", flush=True)
