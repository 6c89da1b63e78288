"""Runs the bidirectional ring (tests/algorithms/bidir_ring.py, loaded through
SHOAL_ALGORITHMS) on a real job, checked against numpy; launched by
tests/test_sim_algorithms.py."""

from __future__ import annotations

import numpy as np

import shoal

shoal.init()
r, n = shoal.rank(), shoal.world_size()
for count in (1, 7, 1000, 65_537):
    rng = np.random.default_rng(count)
    inputs = [rng.integers(-100, 100, count).astype(np.float32) for _ in range(n)]
    out = shoal.allreduce(inputs[r].copy(), algorithm="bidir_ring")
    assert np.array_equal(out, np.sum(inputs, axis=0)), (r, count)
shoal.finalize()
print(f"rank {r}: ok")
