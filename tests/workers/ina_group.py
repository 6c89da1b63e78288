"""Sub-groups on the aggregation switch: ranks [1, 2, 3] and the even ranks each
run allreduce(algorithm="ina") on their group, checked against numpy; the
switch's metrics (read by the test) show a job per group, and (read by rank 0,
at INA_METRICS_URL) that finalize ends them all while the groups are still held.

Values are small integers, so every sum is exact in any order."""

from __future__ import annotations

import os
import re
import time
import urllib.request

import numpy as np

import shoal


def contribution(rank: int, salt: int) -> np.ndarray:
    return ((np.arange(50_000) * 7 + rank * 131 + salt) % 1024).astype(np.float32)


def check(group: shoal.Group, members: list[int], salt: int) -> None:
    x = contribution(shoal.rank(), salt)
    group.allreduce(x, algorithm="ina")
    want = sum(contribution(r, salt) for r in members)
    assert np.array_equal(x, want), f"rank {shoal.rank()} group {members}: wrong sum"


def switch_jobs_end(metrics_url: str, timeout: float = 10.0) -> None:
    """Waits until the switch serves no job: finalize ends the groups' switch
    jobs too, though `main` still holds the groups."""
    deadline = time.monotonic() + timeout
    while True:
        text = urllib.request.urlopen(metrics_url, timeout=2).read().decode()
        found = re.search(r"^shoal_switch_active_jobs (\d+)$", text, re.M)
        assert found, text
        active = int(found.group(1))
        if active == 0:
            return
        assert time.monotonic() < deadline, f"{active} switch job(s) still active {timeout}s after finalize"
        time.sleep(0.1)


def main() -> None:
    shoal.init()
    groups = {tuple(m): shoal.new_group(m) for m in ([1, 2, 3], [0, 2])}
    for salt in range(5):
        for members, group in groups.items():
            if group is not None:
                check(group, list(members), salt)
    rank = shoal.rank()
    shoal.finalize()
    if rank == 0 and "INA_METRICS_URL" in os.environ:
        switch_jobs_end(os.environ["INA_METRICS_URL"])
    print("OK ina groups", flush=True)


if __name__ == "__main__":
    main()
