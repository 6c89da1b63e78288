"""The shared-memory (`shm_*`) algorithms: every one x dtypes x ops at worlds
1-8 and odd counts, exact against numpy, through real processes; a killed
rank makes the others raise within seconds."""

from __future__ import annotations

import re

import pytest
from conftest import launch, spawn_ranks

# Odd counts everywhere; the large one (more than one 32 KiB read piece per
# shard) only where the world is small enough to stay quick on 2 cores.
COUNTS = {1: "1,7", 2: "0,1,7,1023,65537", 3: "1,7,1023,65537", 4: "1,7,1023", 5: "1,7,1023", 8: "1,7"}


@pytest.mark.parametrize("world", sorted(COUNTS))
def test_shm_algorithms_exact(world: int) -> None:
    proc = launch(world, "shm_collectives.py", COUNTS[world], env={"SHOAL_TRANSPORT": "shm"}, timeout=120)
    assert proc.stdout.count("OK ") == world, proc.stdout[-2000:]


@pytest.mark.parametrize("algorithm", ["shm_flat", "shm_sharded"])
def test_killed_rank_makes_the_others_raise_quickly(algorithm: str) -> None:
    victim = 1
    env = {"SHOAL_TRANSPORT": "shm", "SHOAL_TIMEOUT": "120"}
    results = spawn_ranks(3, "shm_die.py", str(victim), algorithm, env=env)
    assert results[victim].returncode == -9
    for r, res in enumerate(results):
        if r == victim:
            continue
        m = re.search(r"RAISED after ([\d.]+)s: (\w+): (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr}"
        assert float(m[1]) < 10, (r, m[0])
        assert m[2] in ("PeerDiedError", "AbortedError"), (r, m[0])
        assert f"rank {victim}" in m[3], (r, m[0])


def test_shm_algorithm_over_tcp_is_a_clear_error() -> None:
    proc = launch(2, "shm_die.py", "-1", "shm_flat", env={"SHOAL_TRANSPORT": "tcp"}, check=False)
    assert proc.returncode != 0
    assert "reads peers' memory" in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("others", "odd"),
    [
        ("allreduce:algo=shm_flat", "broadcast:algo=shm_read"),
        ("allreduce:algo=shm_sharded", "allreduce:algo=shm_sharded,count=999"),
        ("allreduce:algo=shm_flat", "allreduce:algo=recursive_doubling"),
    ],
    ids=["kind", "count", "algorithm"],
)
def test_mismatched_shm_calls_raise_on_every_rank(others: str, odd: str) -> None:
    env = {"SHOAL_TRANSPORT": "shm", "SHOAL_TIMEOUT": "60"}
    results = spawn_ranks(3, "mismatch.py", "calls", others, odd, "2", env=env)
    for r, res in enumerate(results):
        m = re.search(r"RAISED (\w+) at round \d+: (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr}"
        assert "mismatch" in m[2].lower(), (r, m[2])


def test_shm_algorithm_across_hosts_is_a_clear_error() -> None:
    results = spawn_ranks(2, "shm_die.py", "-1", "shm_flat", rank_env=lambda r: {"SHOAL_HOST_ID": "ab"[r]})
    for r, res in enumerate(results):
        assert res.returncode != 0, r
        assert "needs every rank on one host" in res.stdout + res.stderr, res.stdout[-2000:] + res.stderr[-2000:]
