"""shoal's demo: run with `shoal run -n 4 python examples/demo.py`."""

import time

import numpy as np

import shoal

shoal.init()
rank, size = shoal.rank(), shoal.size()

# allreduce: every rank contributes (rank + 1) * [0, 1, 2, ...]
x = np.arange(10, dtype=np.float32) * (rank + 1)
shoal.allreduce(x, op="sum")
expected = np.arange(10, dtype=np.float32) * size * (size + 1) / 2
assert np.array_equal(x, expected), (x, expected)

# broadcast from the last rank, allgather of each rank's id
y = np.full(4, rank, dtype=np.int64)
shoal.broadcast(y, root=size - 1)
ids = shoal.allgather(np.array([rank], dtype=np.int32))

# asynchronous allreduce while Python carries on
big = np.ones(1 << 20, dtype=np.float32)
work = shoal.allreduce(big, async_op=True)
busy = sum(range(10000))
work.wait()

# timing of a 16 MiB allreduce, chosen algorithm and its time
big = np.ones(4 << 20, dtype=np.float32)
shoal.barrier()
start = time.perf_counter()
shoal.allreduce(big)
elapsed = time.perf_counter() - start
algo = shoal.world().choose_algorithm("allreduce", big.size)
if rank == 0:
    print(f"world of {size}, local ranks {shoal.world().local_ranks}")
    print(f"allreduce      -> {x[:4]} ... (expected {expected[:4]} ...)")
    print(f"broadcast      -> {y}")
    print(f"allgather      -> {ids.ravel()}")
    print(f"async allreduce of 4 MiB done: {bool(big[0] == size)}")
    print(f"16 MiB allreduce with '{algo}': {elapsed * 1e3:.1f} ms")
shoal.finalize()
