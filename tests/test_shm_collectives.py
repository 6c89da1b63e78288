"""The shared-memory (`shm_*`) algorithms: every one x dtypes x ops at worlds
1-8 and odd counts, exact against numpy, through real processes; a killed
rank makes the others raise within seconds."""

from __future__ import annotations

import re

import pytest
from conftest import launch, spawn_ranks

# Odd counts everywhere; the large one (more than one 32 KiB read piece per
# shard) only where the world is small enough to stay quick on 2 cores.
# With the default 16 KiB slots (SHOAL_SHM_SLOT_BYTES) counts up to 1023 go
# through the slots (Inputs of every dtype fit), 65537 is exposed in place.
COUNTS = {1: "1,7", 2: "0,1,7,1023,65537", 3: "1,7,1023,65537", 4: "1,7,1023", 5: "1,7,1023", 8: "1,7"}


@pytest.mark.parametrize("world", sorted(COUNTS))
def test_shm_algorithms_exact(world: int) -> None:
    proc = launch(world, "shm_collectives.py", COUNTS[world], env={"SHOAL_TRANSPORT": "shm"}, timeout=120)
    assert proc.stdout.count("OK ") == world, proc.stdout[-2000:]


@pytest.mark.parametrize(
    ("world", "slot_bytes"),
    # 64-byte slots: 7 elements of 4 or 8 bytes fit, 15 of 8 do not, so
    # one run mixes slot and in-place exposures (and reduce_scatter's world*n
    # Input straddles the slot); 0 turns slots off.
    [(3, "64"), (4, "64"), (3, "0")],
    ids=["slot-64B-w3", "slot-64B-w4", "slots-off-w3"],
)
def test_shm_algorithms_exact_across_the_slot_size(world: int, slot_bytes: str) -> None:
    env = {"SHOAL_TRANSPORT": "shm", "SHOAL_SHM_SLOT_BYTES": slot_bytes}
    proc = launch(world, "shm_collectives.py", "1,7,15,16,33", env=env, timeout=120)
    assert proc.stdout.count("OK ") == world, proc.stdout[-2000:]


@pytest.mark.parametrize(
    ("world", "wait"),
    # busy spinning oversubscribed (4 ranks on the 2-vCPU VM) must still make progress
    [(2, "spin"), (2, "auto"), (4, "spin"), (4, "auto"), (3, "yield")],
)
def test_shm_algorithms_exact_under_each_wait_policy(world: int, wait: str) -> None:
    env = {"SHOAL_TRANSPORT": "shm", "SHOAL_WAIT": wait}
    proc = launch(world, "shm_collectives.py", "1,7,1023", env=env, timeout=120)
    assert proc.stdout.count("OK ") == world, proc.stdout[-2000:]


@pytest.mark.parametrize(
    ("algorithm", "count"),
    # 3 elements: exposed through the slots; 65536: in place.
    [("shm_flat", 3), ("shm_flat", 1 << 16), ("shm_sharded", 1 << 16)],
)
def test_killed_rank_makes_the_others_raise_quickly(algorithm: str, count: int) -> None:
    victim = 1
    env = {"SHOAL_TRANSPORT": "shm", "SHOAL_TIMEOUT": "120"}
    results = spawn_ranks(3, "shm_die.py", str(victim), algorithm, str(count), env=env)
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
