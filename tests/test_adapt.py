"""Calls that choose their algorithm as they run (SHOAL_ADAPT, comm/adapt.rs):
every contender they explore gives the right result, every rank runs the same
algorithm in every call, and the setting must be alike on every rank."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from conftest import launch, spawn_ranks

from shoal.trace import load_rank

# Reads in place priced as messages, so that both ways of moving data are
# contenders whatever this machine's calibration says; no measured rows; and
# the host's CPUs counted as more than its ranks, since calls do not adapt
# where ranks outnumber CPUs (3 ranks on a 2-CPU machine would not).
PRICED_ALIKE = {
    "SHOAL_COST": "alpha=2e-6,beta=1e-10,gamma=1e-10,alpha_local=1e-6,beta_local=1e-10,beta_read=1e-10",
    "SHOAL_TUNE_BUILTIN": "0",
    "SHOAL_HOST_CPUS": "64",
}


def algorithms_by_call(trace_dir: Path, n: int) -> dict[str, list[tuple[int, str]]]:
    """Per collective, the (count, algorithm) of each call of the world
    communicator in call order, the same on every rank (or the test fails)."""
    per_rank = []
    for r in range(n):
        calls = [e["args"] for e in load_rank(trace_dir / f"rank-{r}.json") if e.get("cat") == "call"]
        # Not the agreements (first use, and the exchanges that end an epoch).
        ran = [(a["collective"], a["count"], a["algorithm"]) for a in calls if a["comm"] == 0]
        per_rank.append([c for c in ran if c[2] != "(agreement)"])
    for r in range(1, n):
        assert per_rank[r] == per_rank[0], f"rank {r} ran other algorithms than rank 0"
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for collective, count, algorithm in per_rank[0]:
        out[collective].append((count, algorithm))
    return out


@pytest.mark.parametrize(
    ("n", "adapt", "collectives"),
    [
        (2, "exact", "broadcast,allgather"),
        (3, "exact", "broadcast"),
        (2, "all", "allreduce"),
        (3, "all", "allreduce"),
    ],
)
def test_adapting_calls_are_right_and_every_rank_runs_the_same(
    tmp_path: Path, n: int, adapt: str, collectives: str
) -> None:
    env = {**PRICED_ALIKE, "SHOAL_ADAPT": adapt, "SHOAL_TRACE": str(tmp_path)}
    proc = launch(n, "adapt.py", collectives, env=env)
    assert proc.stdout.count("leads") == 2 * len(collectives.split(","))
    ran = algorithms_by_call(tmp_path, n)
    for collective in collectives.split(","):
        tried = {a for _, a in ran[collective]}
        # The calls explored more than one contender, each checked by the worker.
        assert len(tried) >= 2, f"{collective} ran only {tried}"


def test_calls_of_16_kib_adapt_by_default(tmp_path: Path) -> None:
    # 4096 float32 values, SHOAL_ADAPT_BYTES' default: on the dev VM, which
    # of shm_read and the chains is the faster 16 KiB broadcast moves with
    # the VM's state from one run to the next (docs/benchmarks.md).
    env = {**PRICED_ALIKE, "SHOAL_TRACE": str(tmp_path), "ADAPT_COUNTS": "4096"}
    launch(2, "adapt.py", "broadcast", env=env)
    by_count = algorithms_by_count(tmp_path, 2, "broadcast")
    assert by_count and all(len(a) >= 2 for a in by_count.values()), by_count


def test_off_keeps_each_shape_to_one_algorithm(tmp_path: Path) -> None:
    env = {**PRICED_ALIKE, "SHOAL_ADAPT": "off", "SHOAL_TRACE": str(tmp_path)}
    launch(2, "adapt.py", "broadcast", env=env)
    ran = algorithms_by_call(tmp_path, 2)
    calls = ran["broadcast"]
    assert len(calls) == 2 * 400
    # The worker's roots alternate: a shape's calls are every other call of a count.
    for i in range(len(calls) - 2):
        if calls[i][0] == calls[i + 2][0]:
            assert calls[i][1] == calls[i + 2][1], f"calls {i} and {i + 2} ran {calls[i][1]}, {calls[i + 2][1]}"


def algorithms_by_count(trace_dir: Path, n: int, collective: str) -> dict[int, set[str]]:
    by_count = defaultdict(set)
    for count, algorithm in algorithms_by_call(trace_dir, n)[collective]:
        by_count[count].add(algorithm)
    return by_count


@pytest.mark.parametrize(
    ("n", "collective", "dtype"),
    [(2, "allreduce", "float32"), (3, "allreduce", "int32"), (2, "reduce_scatter", "float32")],
)
def test_reductions_whose_bits_cannot_change_adapt_by_default(
    tmp_path: Path, n: int, collective: str, dtype: str
) -> None:
    # A float sum of 2 ranks is one rounding whatever the algorithm;
    # integer reductions are exact in any order. The worker checks every
    # call's result, the trace that every rank ran the same algorithm.
    env = {**PRICED_ALIKE, "SHOAL_TRACE": str(tmp_path)}
    launch(n, "adapt.py", collective, dtype, env=env)
    by_count = algorithms_by_count(tmp_path, n, collective)
    assert all(len(a) >= 2 for a in by_count.values()), by_count


def test_float_reductions_of_3_ranks_do_not_adapt_by_default(tmp_path: Path) -> None:
    # Their rounding would change with the algorithm.
    env = {**PRICED_ALIKE, "SHOAL_TRACE": str(tmp_path)}
    launch(3, "adapt.py", "allreduce", env=env)
    by_count = algorithms_by_count(tmp_path, 3, "allreduce")
    assert all(len(a) == 1 for a in by_count.values()), by_count


@pytest.mark.parametrize("cpus", [("1", "1"), ("1", "2")])
def test_no_call_adapts_where_some_host_runs_more_ranks_than_cpus(tmp_path: Path, cpus: tuple[str, str]) -> None:
    # A call's time no longer measures the job's throughput. Every rank
    # agrees, even one whose own count says its ranks fit.
    env = {**PRICED_ALIKE, "SHOAL_TRACE": str(tmp_path)}
    results = spawn_ranks(
        2, "adapt.py", "broadcast", env=env, rank_env=lambda r: {"SHOAL_HOST_CPUS": cpus[r]}, timeout=240
    )
    for r, res in enumerate(results):
        assert res.returncode == 0, f"rank {r}: {res.stderr[-2000:]}"
    assert all(len(a) == 1 for a in algorithms_by_count(tmp_path, 2, "broadcast").values())


def test_the_setting_must_be_alike_on_every_rank() -> None:
    results = spawn_ranks(
        2, "adapt.py", "broadcast", rank_env=lambda r: {"SHOAL_ADAPT": "off" if r else "exact"}, timeout=120
    )
    for r, res in enumerate(results):
        assert res.returncode != 0, f"rank {r} ran on"
        assert "SHOAL_ADAPT or SHOAL_ADAPT_BYTES differ" in res.stderr, res.stderr[-2000:]
