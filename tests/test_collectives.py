"""Every collective x algorithm over shm and tcp, world sizes 1..8, all
dtypes and ops, counts 0, 1, 7 and about a million, checked against numpy."""

from __future__ import annotations

import pytest
from conftest import launch, spawn_ranks

WORLDS = [1, 2, 3, 4, 5, 8]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", WORLDS)
def test_every_collective_and_algorithm(transport: str, world: int) -> None:
    # the million-element cases are the slow part; 8 ranks on 2 cores get a smaller "big" count
    big = "1048583" if world <= 4 else "262147"
    proc = launch(world, "collectives.py", env={"SHOAL_TRANSPORT": transport, "BIG_COUNT": big}, timeout=900)
    assert proc.stdout.count("OK ") == world, proc.stdout[-2000:]


@pytest.mark.parametrize(
    "hosts",
    [
        ["a", "a", "b", "b"],  # 2 hosts x 2 ranks: shm inside, tcp across
        ["a", "a", "b", "b", "c", "c"],  # 3 hosts x 2 ranks
        ["a", "b", "a", "b", "b"],  # irregular placement: topology-aware algorithms fall back to flat
    ],
    ids=["2x2", "3x2", "irregular"],
)
def test_emulated_hosts(hosts: list[str]) -> None:
    """Ranks with different SHOAL_HOST_IDs act as different hosts on this machine, so
    the mixed shm+tcp transport and the topology-aware algorithms run for real."""
    only = "allreduce,broadcast,allgather,reduce_scatter,barrier"
    results = spawn_ranks(
        len(hosts),
        "collectives.py",
        only,
        env={"BIG_COUNT": "65537"},
        timeout=600,
        rank_env=lambda r: {"SHOAL_HOST_ID": hosts[r]},
    )
    for r, res in enumerate(results):
        assert res.returncode == 0 and "OK " in res.stdout, f"rank {r}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_per_rank_counts(transport: str, world: int) -> None:
    """allgather and reduce_scatter with counts, alltoall with send/recv counts: uneven blocks, zeros."""
    proc = launch(world, "varied_counts.py", env={"SHOAL_TRANSPORT": transport}, timeout=300)
    assert proc.stdout.count("OK varied counts") == world, proc.stdout[-2000:]
