"""Failures surface through torch as shoal's errors instead of hangs.

    torch_failures.py mismatch   ranks all_reduce different sizes: every rank raises
    torch_failures.py die        rank 1 exits; rank 0's all_reduce raises
    torch_failures.py stall      rank 1 stays silent; rank 0 builds a DDP model, whose
                                 construction runs a collective from torch's C++ code
                                 (parameter shapes checked with an all_gather): it must
                                 fail after SHOAL_TIMEOUT, not hang

Each rank prints "RAISED <error type>: <message>" or "OK".
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import shoal.torch  # noqa: F401  (registers the backend)


def main() -> None:
    mode = sys.argv[1]
    dist.init_process_group("shoal")
    r = dist.get_rank()
    try:
        if mode == "mismatch":
            dist.all_reduce(torch.ones(4 + r))
        elif mode == "die":
            if r == 1:
                os._exit(3)
            time.sleep(0.5)
            work = dist.all_reduce(torch.ones(1000), async_op=True)
            work.wait()
        elif mode == "stall":
            if r == 1:
                time.sleep(float(os.environ["STALL_SECONDS"]))
                os._exit(0)
            start = time.monotonic()
            try:
                DDP(nn.Linear(2, 2))
            finally:
                print(f"after {time.monotonic() - start:.1f} s", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"RAISED {type(e).__name__}: {e}", flush=True)
        os._exit(0)  # the communicator is unusable: leave without the group's teardown
    dist.destroy_process_group()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
