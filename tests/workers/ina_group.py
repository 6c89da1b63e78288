"""Sub-groups on the aggregation switch: ranks [1, 2, 3] and the even ranks each
run allreduce(algorithm="ina") on their group, checked against numpy; the
switch's metrics (read by the test) show a job per group.

Values are small integers, so every sum is exact in any order."""

from __future__ import annotations

import numpy as np

import shoal


def contribution(rank: int, salt: int) -> np.ndarray:
    return ((np.arange(50_000) * 7 + rank * 131 + salt) % 1024).astype(np.float32)


def check(group: shoal.Group, members: list[int], salt: int) -> None:
    x = contribution(shoal.rank(), salt)
    group.allreduce(x, algorithm="ina")
    want = sum(contribution(r, salt) for r in members)
    assert np.array_equal(x, want), f"rank {shoal.rank()} group {members}: wrong sum"


def main() -> None:
    shoal.init()
    groups = {tuple(m): shoal.new_group(m) for m in ([1, 2, 3], [0, 2])}
    for salt in range(5):
        for members, group in groups.items():
            if group is not None:
                check(group, list(members), salt)
    shoal.finalize()
    print("OK ina groups", flush=True)


if __name__ == "__main__":
    main()
