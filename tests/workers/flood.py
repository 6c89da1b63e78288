"""A sender that runs ahead of its receiver: `flood.py p2p|bcast N BYTES`.

p2p: rank 0 sends N messages of BYTES to rank 1 (blocking sends), rank 1
sleeps first, then receives them all. bcast: rank 0 broadcasts N times,
the others sleep first, then take part. The receivers check every message
against its expected contents and print their peak RSS (VmHWM, KiB) as
`PEAK <kib>`; rank 0 prints how long its sends took as `SENT <seconds>`.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import shoal


def peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def message(i: int, nbytes: int) -> np.ndarray:
    return np.full(nbytes, i % 251, dtype=np.uint8)


def main() -> None:
    what, count, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    shoal.init()
    r = shoal.rank()
    shoal.barrier()
    start = time.monotonic()
    if r != 0:
        time.sleep(2.0)  # the sender runs ahead meanwhile
    buf = np.empty(nbytes, dtype=np.uint8)
    for i in range(count):
        if what == "p2p":
            if r == 0:
                shoal.send(message(i, nbytes), dst=1)
            elif r == 1:
                shoal.recv(buf, src=1 - r)
                assert np.array_equal(buf, message(i, nbytes)), f"message {i} differs"
        else:
            x = message(i, nbytes) if r == 0 else buf
            shoal.broadcast(x, root=0)
            assert np.array_equal(x, message(i, nbytes)), f"broadcast {i} differs"
    if r == 0:
        print(f"SENT {time.monotonic() - start:.2f}", flush=True)
    shoal.barrier()
    print(f"PEAK {peak_rss_kib()}", flush=True)
    shoal.finalize()


if __name__ == "__main__":
    main()
