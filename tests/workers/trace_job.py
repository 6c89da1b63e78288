"""Runs a few collectives with SHOAL_TRACE set and writes, per rank, the
calls it made with the step count of its plan for each (expected-<rank>.json
in the trace directory), for tests/test_trace.py to compare with the trace."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import shoal

out_dir = sys.argv[1]
shoal.init()
world = shoal.world()
r, n = shoal.rank(), shoal.world_size()
comm = world._live()
expected: list[dict[str, object]] = []
agreed: set[tuple[object, ...]] = set()
# The ranks agree on what they run at the first use of a call shape and
# algorithm: a ring allgather of one 64-byte record per rank, traced as the
# call's own "(agreement)" (docs/algorithms.md).
AGREEMENT_STEPS = comm.plan_steps("allgather", 64, "uint8", 0, "ring")


def expect(collective: str, count: int, dtype: str, root: int = 0, algorithm: str | None = None) -> None:
    chosen = algorithm or comm.choose_algorithm(collective, count, dtype, root)
    steps = comm.plan_steps(collective, count, dtype, root, algorithm)
    shape = (collective, count, np.dtype(dtype).itemsize, root, chosen)
    if n > 1 and shape not in agreed:
        agreed.add(shape)
        expected.append({"collective": collective, "algorithm": "(agreement)", "steps": AGREEMENT_STEPS})
    expected.append({"collective": collective, "algorithm": chosen, "steps": steps})


x = np.arange(5000, dtype=np.float32)
for algorithm in ("ring", "recursive_doubling", "ring"):
    shoal.allreduce(x, algorithm=algorithm)
    expect("allreduce", x.size, "float32", algorithm=algorithm)
if "py_ring" in shoal.algorithms("allreduce"):  # SHOAL_ALGORITHMS loaded examples/algorithms/ring_allreduce.py
    z = np.arange(1001, dtype=np.float64) * (r + 1)
    shoal.allreduce(z, algorithm="py_ring")
    expect("allreduce", z.size, "float64", algorithm="py_ring")
    assert np.array_equal(z, np.arange(1001, dtype=np.float64) * n * (n + 1) / 2)
y = np.zeros(300, dtype=np.int32) + r
shoal.broadcast(y, root=n - 1)
expect("broadcast", y.size, "int32", root=n - 1)
shoal.allreduce(x)
expect("allreduce", x.size, "float32")
assert y[0] == n - 1
expect("barrier", 0, "float32")  # in finalize
with open(os.path.join(out_dir, f"expected-{r}.json"), "w") as f:
    json.dump(expected, f)
shoal.finalize()
