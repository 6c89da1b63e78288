"""Hierarchical allreduce with the switch as the inter-host step
(`hierarchical_ina`) on real processes: ranks grouped into "hosts" by
SHOAL_HOST_ID (shared memory inside one, TCP between), a `shoal switch`
daemon summing one shard per local rank across the hosts. Exact results
against numpy, the selector's choice, and the fallback when the switch dies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import WORKERS, free_port, free_ports, spawn_ranks
from test_ina import metric, start_switch, stop_switch, switch


def host_env(local: int) -> Callable[[int], dict[str, str]]:
    """Puts ranks on hosts of `local` ranks each, in blocks."""
    return lambda r: {"SHOAL_HOST_ID": f"host{r // local}"}


def run_hosts(
    hosts: int, local: int, switch_addr: str, *args: str, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    full = {"SHOAL_SWITCH": switch_addr, "SHOAL_CALIBRATE": "0", **(env or {})}
    return spawn_ranks(hosts * local, "ina_hier.py", *args, env=full, timeout=120, rank_env=host_env(local))


def outputs(procs: list[subprocess.CompletedProcess[str]]) -> str:
    return "".join(p.stdout + p.stderr for p in procs)


@pytest.mark.parametrize(("hosts", "local"), [(2, 2), (2, 3)])
def test_hierarchical_ina_matches_numpy(hosts: int, local: int) -> None:
    """Every dtype and op the switch aggregates, odd counts (shards of unequal size), 2 x 2 and 2 x 3."""
    with switch() as (addr, url):
        procs = run_hosts(hosts, local, addr)
        text = outputs(procs)
        assert all(p.returncode == 0 for p in procs), text
        assert text.count("OK ina_hier") == hosts * local, text
        assert "falls back" not in text, text
        # One switch job per shard (local rank) besides the world's.
        assert metric(url, "shoal_switch_jobs_admitted_total") == 1 + local
        assert metric(url, "shoal_switch_aggregations_total") > 0


def test_the_selector_picks_hierarchical_ina_for_several_ranks_per_host_only() -> None:
    """Large allreduce with 2 ranks per host and a switch: hierarchical_ina (also when the call names no
    algorithm); with one rank per host it is flat ina's business."""
    env = {"INA_ALGO": "", "INA_DTYPES": "float32", "INA_OPS": "sum", "INA_COUNTS": "7,1001"}
    with switch() as (addr, _):
        two = outputs(run_hosts(2, 2, addr, env=env))
        one = outputs(run_hosts(4, 1, addr, env=env))
    assert two.count("choice=hierarchical_ina") == 4, two
    assert one.count("OK ina_hier") == 4 and "choice=hierarchical_ina" not in one, one
    assert one.count("choice=ina") == 4, one


def test_shoal_algo_forces_hierarchical_ina() -> None:
    env = {"INA_ALGO": "", "SHOAL_ALGO": "allreduce:hierarchical_ina", "INA_DTYPES": "float32", "INA_OPS": "sum"}
    with switch() as (addr, url):
        text = outputs(run_hosts(2, 2, addr, env=env))
        assert text.count("OK ina_hier") == 4 and "falls back" not in text, text
        assert metric(url, "shoal_switch_jobs_admitted_total") == 3  # the world's, two shards'


def start_hosts(hosts: int, local: int, env: dict[str, str], *args: str) -> list[subprocess.Popen[str]]:
    """Starts the ranks of `ina_hier.py` on emulated hosts without waiting (for tests that kill the switch)."""
    common = {
        **os.environ,
        "SHOAL_CALIBRATE": "0",
        **env,
        "WORLD_SIZE": str(hosts * local),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "SHOAL_JOB_ID": uuid.uuid4().hex,
    }
    return [
        subprocess.Popen(
            [sys.executable, str(WORKERS / "ina_hier.py"), *args],
            env={**common, "RANK": str(r), "LOCAL_RANK": str(r % local), "SHOAL_HOST_ID": f"host{r // local}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(hosts * local)
    ]


def wait_for(url: str, name: str, at_least: float) -> None:
    deadline = time.monotonic() + 30
    while metric(url, name) < at_least and time.monotonic() < deadline:
        time.sleep(0.01)


def finish(procs: list[subprocess.Popen[str]]) -> str:
    """Waits for the ranks; all their output (killed after 120 s)."""
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    text = "".join(o + e for o, e in outs)
    assert all(p.returncode == 0 for p in procs), text
    return text


CALLS = {"INA_DTYPES": "float32", "INA_OPS": "sum", "INA_COUNTS": "100003", "SHOAL_INA_TIMEOUT": "1"}


def test_switch_killed_mid_hierarchical_allreduce_falls_back_and_stays_correct() -> None:
    """SIGKILL the switch while shards are in flight: every rank agrees to redo the call on host
    algorithms, says so, and every result stays exact."""
    port, metrics = free_ports(2)
    url = f"http://127.0.0.1:{metrics}/metrics"
    sw = start_switch(port, metrics)
    # No re-admission: the rest runs on host algorithms.
    env = {**CALLS, "SHOAL_SWITCH": f"127.0.0.1:{port}", "SHOAL_INA_RETRY_CALLS": "0"}
    procs = start_hosts(2, 2, env, "60")
    try:
        wait_for(url, "shoal_switch_aggregations_total", 20)
        sw.kill()  # the daemon dies mid-allreduce
        sw.wait()
        text = finish(procs)
    finally:
        stop_switch(sw)
    assert text.count("OK ina_hier") == 4, text
    assert "falls back to host algorithms" in text, text


def test_after_a_switch_restart_the_shard_jobs_are_joined_again(tmp_path: Path) -> None:
    """The switch dies and comes back: after the back-off the job is re-admitted (its retry call goes
    through flat ina) and the next hierarchical calls join fresh shard jobs on the new switch, which
    then sums the shards (the traces' last switch call of every rank is a shard's, and worked)."""
    port, metrics = free_ports(2)
    url = f"http://127.0.0.1:{metrics}/metrics"
    first = start_switch(port, metrics)
    env = {
        **CALLS,
        "SHOAL_SWITCH": f"127.0.0.1:{port}",
        "SHOAL_INA_RETRY_CALLS": "4",
        "SHOAL_TRACE": str(tmp_path),
    }
    procs = start_hosts(2, 2, env, "50")
    try:
        wait_for(url, "shoal_switch_aggregations_total", 20)
        first.kill()
        first.wait()
        second = start_switch(port, metrics)
        try:
            text = finish(procs)
            admitted = metric(url, "shoal_switch_jobs_admitted_total")
        finally:
            stop_switch(second)
    finally:
        stop_switch(first)
    assert text.count("OK ina_hier") == 4, text
    assert "falls back to host algorithms" in text, text
    assert admitted >= 3, (admitted, text)  # the world's job again and both shards' afresh
    for rank in range(4):
        events = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        last = [e for e in events if e.get("cat") == "ina"][-1]["args"]
        shard_bytes = 4 * (100003 // 2 + (rank % 2 == 0))  # local rank 0 has the odd element
        assert last["status"] == "ok" and last["bytes"] == shard_bytes, (rank, last)


def test_a_sub_group_runs_hierarchical_ina_with_shard_jobs_of_its_own() -> None:
    with switch() as (addr, url):
        env = {"SHOAL_SWITCH": addr, "SHOAL_CALIBRATE": "0"}
        procs = spawn_ranks(6, "ina_hier_group.py", env=env, timeout=120, rank_env=host_env(3))
        text = outputs(procs)
        assert text.count("OK ina_hier group") == 6 and "falls back" not in text, text
        # The world's job, the group's (joined with its first switch call) and the group's two shards'.
        assert metric(url, "shoal_switch_jobs_admitted_total") == 4
