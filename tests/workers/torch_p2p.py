"""Point-to-point patterns that depend on how the core delivers messages.

    torch_p2p.py exchange   every rank isends 8 MB to its neighbour, then irecvs, then waits
    torch_p2p.py same_tag   same-tag messages of different shapes, buffered at the receiver
    torch_p2p.py any_source recv and irecv without src: the sender (global rank), in send order per sender

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


def any_source(r: int, n: int) -> None:
    if r != 0:
        for i in range(2):
            dist.send(torch.tensor([float(r), float(i)]), 0, tag=5)
    else:
        seen: dict[int, list[int]] = {q: [] for q in range(1, n)}
        for k in range(2 * (n - 1)):
            t = torch.empty(2)
            if k % 2:
                work = dist.irecv(t, tag=5)
                work.wait()
                sender = work._source_rank()
            else:
                sender = dist.recv(t, tag=5)
            assert t[0].item() == sender, (t, sender)
            seen[sender].append(int(t[1].item()))
        assert all(v == [0, 1] for v in seen.values()), seen
    dist.barrier()
    # in a sub-group whose group ranks are not the global ones, dist.recv returns the global rank
    sub = dist.new_group(list(range(1, n)))
    if r == n - 1 and n > 2:
        got = torch.empty(1)
        for _ in range(n - 2):
            sender = dist.recv(got, group=sub)
            assert got.item() == sender and 1 <= sender < n - 1, (got, sender)
    elif 0 < r < n - 1:
        dist.send(torch.tensor([float(r)]), n - 1, group=sub)


def main() -> None:
    dist.init_process_group("shoal")
    try:
        modes = {"exchange": exchange, "same_tag": same_tag, "any_source": any_source}
        modes[sys.argv[1]](dist.get_rank(), dist.get_world_size())
        dist.barrier()
    except Exception as e:  # noqa: BLE001
        print(f"RAISED {type(e).__name__}: {e}", flush=True)
        os._exit(0)  # the communicator is unusable: leave without the group's teardown
    dist.destroy_process_group()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
