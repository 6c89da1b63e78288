"""Hierarchical allreduce with the switch as the inter-host step
(`hierarchical_ina`) on real processes: ranks grouped into "hosts" by
SHOAL_HOST_ID (shared memory inside one, TCP between), a `shoal switch`
daemon summing one shard per local rank across the hosts. Exact results
against numpy, the selector's choice, and the fallback when the switch dies."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from conftest import WORKERS, free_port, spawn_ranks
from test_ina import metric, start_switch, stop_switch, switch


def host_env(local: int) -> object:
    """Puts ranks on hosts of `local` ranks each, in blocks."""
    return lambda r: {"SHOAL_HOST_ID": f"host{r // local}"}


def run_hosts(
    hosts: int, local: int, switch_addr: str, *args: str, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    full = {"SHOAL_SWITCH": switch_addr, "SHOAL_CALIBRATE": "0", **(env or {})}
    return spawn_ranks(hosts * local, "ina_hier.py", *args, env=full, timeout=120, rank_env=host_env(local))  # type: ignore[arg-type]


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


def test_switch_killed_mid_hierarchical_allreduce_falls_back_and_stays_correct() -> None:
    """SIGKILL the switch while shards are in flight: every rank agrees to redo the call on host
    algorithms, says so, and every result stays exact."""
    port, metrics = free_port(), free_port()
    url = f"http://127.0.0.1:{metrics}/metrics"
    env = {
        "INA_DTYPES": "float32",
        "INA_OPS": "sum",
        "INA_COUNTS": "100003",
        "SHOAL_INA_TIMEOUT": "1",
        "SHOAL_INA_RETRY_CALLS": "0",  # no re-admission: the rest runs on host algorithms
    }
    sw = start_switch(port, metrics)
    base = {"SHOAL_SWITCH": f"127.0.0.1:{port}", "SHOAL_CALIBRATE": "0", **env}
    common = {
        **os.environ,
        **base,
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "SHOAL_JOB_ID": uuid.uuid4().hex,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS / "ina_hier.py"), "60"],
            env={**common, "RANK": str(r), "LOCAL_RANK": str(r), "SHOAL_HOST_ID": f"host{r // 2}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(4)
    ]
    try:
        deadline = time.monotonic() + 30
        while metric(url, "shoal_switch_aggregations_total") < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        sw.kill()  # the daemon dies mid-allreduce
        sw.wait()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        stop_switch(sw)
        for p in procs:
            if p.poll() is None:
                p.kill()
    text = "".join(o + e for o, e in outs)
    assert all(p.returncode == 0 for p in procs), text
    assert text.count("OK ina_hier") == 4, text
    assert "falls back to host algorithms" in text, text
