"""Point-to-point patterns that depend on how the core delivers messages.

    torch_p2p.py exchange   every rank isends 8 MB to its neighbour, then irecvs, then waits
    torch_p2p.py same_tag   same-tag messages of different shapes, buffered at the receiver

Each rank prints "OK" or "RAISED <error type>: <message>".
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

import shoal.torch  # noqa: F401  (registers the backend)


def exchange(r: int, n: int) -> None:
    nxt, prv = (r + 1) % n, (r - 1) % n
    big = torch.full((1 << 21,), float(r))
    got = torch.empty_like(big)
    works = [dist.isend(big, nxt), dist.irecv(got, prv)]
    for w in works:
        w.wait()
    assert torch.equal(got, torch.full((1 << 21,), float(prv)))


def same_tag(r: int, n: int) -> None:
    if r == 0:
        dist.send(torch.full((3,), 1.0), 1)
        dist.send(torch.full((3,), 2.0), 1)
        dist.send(torch.full((4,), 3.0, dtype=torch.float16), 1)
    elif r == 1:
        time.sleep(1)  # the messages arrive before the receives are posted
        a, b, c = torch.empty(3), torch.empty(3), torch.empty(4, dtype=torch.float16)
        for t in (a, b, c):
            dist.recv(t, 0)
        assert torch.equal(a, torch.full((3,), 1.0)) and torch.equal(b, torch.full((3,), 2.0))
        assert torch.equal(c, torch.full((4,), 3.0, dtype=torch.float16))


def main() -> None:
    dist.init_process_group("shoal")
    try:
        {"exchange": exchange, "same_tag": same_tag}[sys.argv[1]](dist.get_rank(), dist.get_world_size())
        dist.barrier()
    except Exception as e:  # noqa: BLE001
        print(f"RAISED {type(e).__name__}: {e}", flush=True)
        os._exit(0)  # the communicator is unusable: leave without the group's teardown
    dist.destroy_process_group()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
