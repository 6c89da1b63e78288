"""The UCX transport (SHOAL_TRANSPORT=ucx, and SHOAL_REMOTE_TRANSPORT=ucx under
auto) on this machine, over UCX's TCP and shared-memory transports: every
collective against numpy, a killed rank, a mismatch, and the error when
libucp is missing. Skipped, with the reason, only where libucp cannot be
loaded (scripts/test.sh installs it: apt-get install libucx0)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import init_with, launch, spawn_ranks, ucx_missing

MISSING = ucx_missing()
needs_ucx = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

# UCX 1.13 names its shared-memory transports sm (posix, sysv, cma) and self.
TLS = {"tcp": "tcp", "sm": "sm,self"}


def ucx_env(tls: str, **extra: str) -> dict[str, str]:
    return {"SHOAL_TRANSPORT": "ucx", "UCX_TLS": TLS[tls], "UCX_WARN_UNUSED_ENV_VARS": "n", **extra}


# Per world a subset, so the whole stays quick on 2 cores; together every
# collective runs over both UCX transports and every world from 1 to 8.
CASES = [
    (1, "tcp", "allreduce,broadcast,alltoall,barrier"),
    (2, "tcp", ""),
    (2, "sm", ""),
    (3, "sm", "allreduce,reduce,reduce_scatter,gather,scatter"),
    (3, "tcp", "allgather,alltoall,broadcast"),
    (4, "tcp", "allreduce,reduce_scatter,allgather"),
    (5, "sm", "allreduce,broadcast,alltoall"),
    (6, "tcp", "reduce,gather,scatter,barrier"),
    (7, "sm", "allreduce,allgather"),
    (8, "sm", "allreduce,reduce_scatter,broadcast"),
    (8, "tcp", "allreduce,alltoall"),
]


@needs_ucx
@pytest.mark.parametrize(("world", "tls", "only"), CASES)
def test_collectives_match_numpy(world: int, tls: str, only: str) -> None:
    big = "262147" if world <= 4 else "65537"
    proc = launch(world, "ucx_collectives.py", only, env=ucx_env(tls, BIG_COUNT=big), timeout=300)
    assert proc.stdout.count("OK ") == world, proc.stdout[-2000:]


@needs_ucx
def test_remote_peers_over_ucx_local_over_shm() -> None:
    """SHOAL_REMOTE_TRANSPORT=ucx: two emulated hosts, shm inside each, UCX between."""
    hosts = ["a", "a", "b", "b"]
    results = spawn_ranks(
        4,
        "ucx_collectives.py",
        "allreduce,broadcast,allgather,alltoall",
        env={"SHOAL_REMOTE_TRANSPORT": "ucx", "UCX_TLS": "tcp", "BIG_COUNT": "65537"},
        timeout=300,
        rank_env=lambda r: {"SHOAL_HOST_ID": hosts[r]},
    )
    for r, res in enumerate(results):
        assert res.returncode == 0 and "OK " in res.stdout, (r, res.stdout[-2000:], res.stderr[-3000:])


@needs_ucx
@pytest.mark.parametrize("tls", ["tcp", "sm"])
def test_killed_rank_makes_the_others_raise_quickly(tls: str) -> None:
    victim = 2
    results = spawn_ranks(4, "die.py", str(victim), env=ucx_env(tls, SHOAL_TIMEOUT="120"))
    assert results[victim].returncode == -9
    for r, res in enumerate(results):
        if r == victim:
            continue
        m = re.search(r"RAISED after ([\d.]+)s: (\w+): (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr[-3000:]}"
        secs, kind, msg = float(m[1]), m[2], m[3]
        assert secs < 10, (r, secs, msg)
        assert kind in ("PeerDiedError", "AbortedError"), (r, kind, msg)
        assert f"rank {victim}" in msg, (r, msg)


@needs_ucx
@pytest.mark.parametrize("what", ["count", "dtype", "root"])
@pytest.mark.parametrize("tls", ["tcp", "sm"])
def test_mismatched_collectives_raise_on_every_rank(what: str, tls: str) -> None:
    results = spawn_ranks(3, "mismatch.py", what, env=ucx_env(tls, SHOAL_TIMEOUT="60"))
    for r, res in enumerate(results):
        m = re.search(r"RAISED (\w+) at round \d+: (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr[-3000:]}"
        assert "mismatch" in m[2].lower(), (r, m[2])


def test_missing_libucp_names_the_package() -> None:
    """Runs everywhere: a library path that leads nowhere stands for a machine without UCX."""
    proc = init_with({"SHOAL_TRANSPORT": "ucx", "SHOAL_UCX_LIB": "/nonexistent/libucp.so.0"})
    assert proc.returncode != 0 and "initialised" not in proc.stdout
    assert "apt-get install libucx0" in proc.stderr, proc.stderr[-2000:]
    assert "/nonexistent/libucp.so.0" in proc.stderr, proc.stderr[-2000:]


def test_remote_transport_must_be_tcp_or_ucx() -> None:
    proc = init_with({"SHOAL_REMOTE_TRANSPORT": "ib"})
    assert proc.returncode != 0
    assert "SHOAL_REMOTE_TRANSPORT" in proc.stderr and "tcp, ucx" in proc.stderr, proc.stderr[-2000:]


@needs_ucx
def test_bench_runs_over_ucx(tmp_path: Path) -> None:
    """`shoal bench --transport ucx` checks the results and names the UCX path in its table."""
    cmd = [sys.executable, "-m", "shoal.cli", "bench", "allreduce", "-n", "2", "--sizes", "8,256K"]
    cmd += ["--transport", "ucx", "--repeats", "1", "--no-plot", "--no-progress", "--no-roofline"]
    cmd += ["--out", str(tmp_path / "b")]
    proc = subprocess.run(cmd, env={**os.environ, "UCX_TLS": "sm,self"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (tmp_path / "b" / "table.txt").read_text()
    assert "transport ucx (UCX_TLS=sm,self)" in table, table
