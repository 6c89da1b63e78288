"""Receive from any source (``shoal.recv(x)`` without ``src``) on a real job.

``python recv_any.py MODE``:
- ``match``: every other rank sends rank 0 three messages with one tag; rank 0
  receives them from any source: each reports its sender, per sender in send
  order, mixed with a receive that names the source; in a sub-group the
  source is a group rank; the message that arrived first is taken first.
- ``mismatch``: the message has another size than the receive: an error.
- ``stall``: nobody sends: a timeout naming the wait, on every rank.
Prints "OK recv_any MODE" per rank.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import shoal


def payload(rank: int, index: int) -> np.ndarray:
    return np.array([rank, index, rank * 10 + index], dtype=np.int64)


def match(r: int, n: int) -> None:
    tag = 7
    if r != 0:
        for i in range(3):
            shoal.send(payload(r, i), 0, tag=tag)
    else:
        got: dict[int, list[int]] = {q: [] for q in range(1, n)}
        x = np.empty(3, dtype=np.int64)
        # rank 1's first message by name: any-source receives then start at its second
        shoal.recv(x, 1, tag=tag)
        assert np.array_equal(x, payload(1, 0)), x
        got[1].append(0)
        for _ in range(3 * (n - 1) - 1):
            y, source = shoal.recv(np.empty(3, dtype=np.int64), tag=tag)
            assert np.array_equal(y, payload(source, int(y[1]))) and y[0] == source, (y, source)
            got[source].append(int(y[1]))
        assert all(got[q] == [0, 1, 2] for q in got), got  # per sender, in send order
    shoal.barrier()

    # another tag does not match; another size is another message (tag 8)
    if r == 1:
        shoal.send(np.arange(4, dtype=np.float32), 0, tag=8)
    if r == 0:
        z = np.empty(4, dtype=np.float32)
        _, source = shoal.recv(z, tag=8)
        assert source == 1 and np.array_equal(z, np.arange(4)), (source, z)
    shoal.barrier()

    # the message that arrived first is taken first: rank n-1 sends once rank 1's has arrived
    if n >= 3:
        if r == 1:
            shoal.send(payload(1, 9), 0, tag=11)
            shoal.send(np.zeros(1, np.int64), n - 1, tag=12)  # go
        elif r == n - 1:
            shoal.recv(np.zeros(1, np.int64), 1, tag=12)
            time.sleep(0.2)
            shoal.send(payload(n - 1, 9), 0, tag=11)
        if r == 0:
            time.sleep(1.0)  # both have arrived
            order = [shoal.recv(np.empty(3, np.int64), tag=11)[1] for _ in range(2)]
            assert order == [1, n - 1], order
        shoal.barrier()

    # in a sub-group, the source is a group rank
    members = list(range(n - 1, -1, -1))  # reversed: group rank q is world rank n-1-q
    g = shoal.new_group(members)
    assert g is not None
    if g.rank != 0:
        g.send(np.full(2, g.rank, np.int32), 0, tag=3)
    else:
        for _ in range(n - 1):
            v, source = g.recv(np.empty(2, np.int32), tag=3)
            assert np.all(v == source), (v, source)
    g.barrier()
    print(f"rank {r}: OK recv_any match", flush=True)


def mismatch(r: int, n: int) -> None:
    if r == 1:
        shoal.send(np.zeros(5, np.float32), 0, tag=2)
    if r == 0:
        try:
            shoal.recv(np.zeros(4, np.float32), tag=2)
        except shoal.ShoalError as e:
            print(f"RAISED {type(e).__name__}: {e}", flush=True)
        else:
            raise AssertionError("a message of 5 elements filled a receive of 4")
    print(f"rank {r}: OK recv_any mismatch", flush=True)


def stall(r: int, n: int) -> None:
    if r == 0:
        start = time.monotonic()
        try:
            shoal.recv(np.zeros(4, np.float32), tag=2)
        except shoal.ShoalTimeoutError as e:
            print(f"RAISED after {time.monotonic() - start:.1f} s: {e}", flush=True)
        else:
            raise AssertionError("a receive nobody sends to returned")
    else:
        time.sleep(6)  # inside Python, not shoal: asked what it waits for, it cannot answer
    print(f"rank {r}: OK recv_any stall", flush=True)


def main() -> None:
    shoal.init()
    r, n = shoal.rank(), shoal.world_size()
    {"match": match, "mismatch": mismatch, "stall": stall}[sys.argv[1]](r, n)
    if sys.argv[1] == "match":
        shoal.finalize()


if __name__ == "__main__":
    main()
