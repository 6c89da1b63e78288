"""A sub-group on hierarchical_ina: of 2 hosts x 3 ranks, ranks [0, 1, 3, 4]
(local ranks 0 and 1 of each host: 2 hosts x 2 in the group) run
allreduce(algorithm="hierarchical_ina") on their group, checked against
numpy; the others only make the group. The switch's metrics (read by the
test) show the group's shard jobs.

Values are small integers, so every sum is exact in any order."""

from __future__ import annotations

import numpy as np

import shoal

MEMBERS = [0, 1, 3, 4]


def contribution(rank: int, salt: int) -> np.ndarray:
    return ((np.arange(50_001) * 7 + rank * 131 + salt) % 1024).astype(np.float32)


def main() -> None:
    shoal.init()
    group = shoal.new_group(MEMBERS)
    if group is not None:
        for salt in range(5):
            x = contribution(shoal.rank(), salt)
            group.allreduce(x, algorithm="hierarchical_ina")
            want = sum(contribution(r, salt) for r in MEMBERS)
            assert np.array_equal(x, want), f"rank {shoal.rank()}: wrong sum"
    shoal.finalize()
    print("OK ina_hier group", flush=True)


if __name__ == "__main__":
    main()
