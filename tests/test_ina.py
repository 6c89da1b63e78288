"""In-network aggregation on real processes: a `shoal switch` daemon, workers
launched by `shoal run` with SHOAL_SWITCH, results checked against numpy; loss,
two jobs, two trees, int32 mode, and fallback when the switch is missing or dies."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import WORKERS, free_port, launch


@contextmanager
def switch(*args: str) -> Iterator[tuple[str, str]]:
    """Runs `shoal switch` on loopback; yields (its address, its metrics URL).
    The daemon's process is kept in `switch.last` for tests that kill it."""
    port, metrics = free_port(), free_port()
    cmd = [
        sys.executable,
        "-m",
        "shoal.cli",
        "switch",
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics",
        f"127.0.0.1:{metrics}",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{metrics}/metrics"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"switch did not start: {proc.stdout.read() if proc.stdout else ''}") from None
                time.sleep(0.05)
        switch.last = proc  # type: ignore[attr-defined]
        yield f"127.0.0.1:{port}", url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def run_workers(
    n: int, switch_addr: str, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return launch(n, "ina.py", *args, env={"SHOAL_SWITCH": switch_addr, **(env or {})}, check=check, timeout=600)


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_ina_allreduce_matches_numpy(world: int) -> None:
    counts = "0,1,7,1000,100003" if world <= 4 else "0,1,7,1000,20011"
    with switch() as (addr, url):
        proc = run_workers(world, addr, env={"INA_COUNTS": counts})
        assert proc.stdout.count("OK ina") == world
        assert "falls back" not in proc.stderr + proc.stdout, proc.stderr
        assert metric(url, "shoal_switch_aggregations_total") > 0


@pytest.mark.parametrize("drop", ["0.01", "0.1"])
def test_ina_exact_under_packet_loss(drop: str) -> None:
    env = {"INA_DTYPES": "float32,int32", "INA_COUNTS": "1,1000,100003"}
    with switch("--drop-rate", drop) as (addr, url):
        proc = run_workers(3, addr, env=env)
        assert proc.stdout.count("OK ina") == 3 and "falls back" not in proc.stdout + proc.stderr
        assert metric(url, "shoal_switch_retransmissions_total") > 0


def test_two_jobs_share_one_switch() -> None:
    env = {"SHOAL_TRANSPORT": "shm", "INA_DTYPES": "float32", "INA_COUNTS": "1,1000,100003"}
    with switch() as (addr, _):
        cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", "2", "--", sys.executable, str(WORKERS / "ina.py"), "3"]
        full_env = {**os.environ, **env, "SHOAL_SWITCH": addr}
        jobs = [
            subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [j.communicate(timeout=600) for j in jobs]
        for j, (out, err) in zip(jobs, outs):
            assert j.returncode == 0 and out.count("OK ina") == 2, out + err
            assert "falls back" not in out + err


def test_two_trees() -> None:
    with switch() as (a, url_a), switch() as (b, url_b):
        proc = run_workers(3, f"{a},{b}", env={"INA_DTYPES": "float32,float16", "INA_COUNTS": "1,1000,100003"})
        assert proc.stdout.count("OK ina") == 3 and "falls back" not in proc.stdout + proc.stderr
        assert metric(url_a, "shoal_switch_aggregations_total") > 0
        assert metric(url_b, "shoal_switch_aggregations_total") > 0


def test_int32_exponent_mode_on_an_integer_only_switch() -> None:
    env = {"SHOAL_INA_INT32": "1", "INA_DTYPES": "float32", "INA_COUNTS": "1,1000,100003"}
    with switch("--int-only") as (addr, url):
        proc = run_workers(3, addr, env=env)
        assert proc.stdout.count("OK ina") == 3 and "falls back" not in proc.stdout + proc.stderr
        assert metric(url, "shoal_switch_aggregations_total") > 0


def test_unreachable_switch_falls_back_with_a_warning() -> None:
    proc = run_workers(3, f"127.0.0.1:{free_port()}", env={"INA_DTYPES": "float32", "INA_COUNTS": "1,1000"})
    assert proc.stdout.count("OK ina") == 3
    assert "in-network aggregation unavailable" in proc.stdout + proc.stderr
    assert "falls back to host algorithms" in proc.stdout + proc.stderr


def test_switch_killed_mid_allreduce_falls_back_and_stays_correct() -> None:
    env = {"INA_DTYPES": "float32", "INA_COUNTS": "100003", "SHOAL_INA_TIMEOUT": "1"}
    with switch() as (addr, url):
        cmd = [
            sys.executable,
            "-m",
            "shoal.cli",
            "run",
            "-n",
            "3",
            "--",
            sys.executable,
            str(WORKERS / "ina.py"),
            "400",
        ]
        job = subprocess.Popen(
            cmd,
            env={**os.environ, **env, "SHOAL_SWITCH": addr},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while metric(url, "shoal_switch_aggregations_total") < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        switch.last.kill()  # type: ignore[attr-defined]  # SIGKILL: the daemon dies mid-allreduce
        out, err = job.communicate(timeout=600)
    assert job.returncode == 0 and out.count("OK ina") == 3, out + err
    assert "falls back to host algorithms" in out + err
