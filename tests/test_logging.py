"""Logging on real processes: what SHOAL_LOG shows at init and per call, per-rank
SHOAL_LOG_FILE files, a bad SHOAL_LOG, records in Python's logging, and warnings
once per process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port, launch
from test_ina import switch

import shoal

SETUP_AND_CALLS = "info,shoal_core::comm=debug"


def rank_lines(text: str, rank: int) -> list[str]:
    """The lines `shoal run` prefixed with `rank`."""
    return [line for line in text.splitlines() if line.startswith(f"[{rank}]: ")]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_info_shows_the_setup_on_rank_0_and_debug_the_algorithm(transport: str) -> None:
    env = {"SHOAL_LOG": SETUP_AND_CALLS, "SHOAL_TRANSPORT": transport}
    proc = launch(2, "log_events.py", "calls", env=env)
    zero, one = "\n".join(rank_lines(proc.stderr, 0)), "\n".join(rank_lines(proc.stderr, 1))
    assert f"INFO shoal[rank 0] shoal_core::init: shoal {shoal.__version__}: 2 ranks on 1 host(s)" in zero, zero
    if transport == "shm":
        shm = r"on this host: shm, \d+ KiB rings, messages from \d+ KiB of calls from \d+ KiB read once by cross-memory"
        assert re.search(shm, zero)
    else:
        assert re.search(r"on this host: tcp, congestion control \w+ \(SHOAL_TRANSPORT=tcp\)", zero), zero
    assert "transport to the 0 rank(s) on other hosts: none" in zero
    calibrated = (
        r"calibrated against rank 1 on this host and nobody on other hosts: "
        r"on this host .* GB/s, read in place [0-9.]+ GB/s"
    )
    assert re.search(calibrated, zero), zero
    # Only rank 0 tells the setup; every rank logs its calls' algorithm.
    assert "INFO" not in one, one
    for text, rank in ((zero, 0), (one, 1)):
        assert re.search(rf"DEBUG shoal\[rank {rank}\] shoal_core::comm: allreduce runs ring comm=0", text), text


def test_without_shoal_log_only_warnings_show() -> None:
    proc = launch(2, "log_events.py", "calls", env={"SHOAL_LOG": ""})
    assert "shoal[rank" not in proc.stderr, proc.stderr


def test_log_file_per_rank(tmp_path: Path) -> None:
    pattern = tmp_path / "shoal-%r.log"
    env = {"SHOAL_LOG": SETUP_AND_CALLS, "SHOAL_LOG_FILE": str(pattern)}
    proc = launch(2, "log_events.py", "calls", env=env)
    assert "shoal[rank" not in proc.stderr, proc.stderr  # the lines went to the files
    files = {r: (tmp_path / f"shoal-{r}.log").read_text() for r in (0, 1)}
    assert "shoal[rank 0] shoal_core::init: shoal " in files[0]
    assert "allreduce runs ring" in files[0] and "allreduce runs ring" in files[1]
    assert "shoal[rank 0]" not in files[1] and "shoal[rank 1]" not in files[0]
    # Lines carry an RFC 3339 timestamp.
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", files[1]), files[1]


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"SHOAL_LOG": "info,shoal_core=loud"}, 'SHOAL_LOG="info,shoal_core=loud" is not a log filter'),
        ({"SHOAL_LOG_FILE": "/no/such/dir/shoal-%r.log"}, "SHOAL_LOG_FILE="),
    ],
)
def test_bad_settings_are_a_clear_error(env: dict[str, str], names: str) -> None:
    code = "import shoal; shoal.init()"
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "ValueError" in out.stderr and names in out.stderr, out.stderr


def test_python_logging_receives_the_records() -> None:
    proc = launch(2, "log_events.py", "python", env={"SHOAL_LOG": SETUP_AND_CALLS})
    assert proc.stdout.count("OK log python") == 2
    zero, one = "\n".join(rank_lines(proc.stdout, 0)), "\n".join(rank_lines(proc.stdout, 1))
    assert f"PYLOG shoal.core.init INFO 0 shoal {shoal.__version__}: 2 ranks on 1 host(s)" in zero, zero
    assert "PYLOG shoal.core.calibrate INFO 0 calibrated against rank 1" in zero
    assert "PYLOG shoal.core.comm DEBUG 1 allreduce runs ring" in one, one
    # Python's handlers took them: nothing was printed besides.
    assert "shoal[rank" not in proc.stderr, proc.stderr


def test_a_warning_shows_once_per_process() -> None:
    # Two jobs one after the other in each process, each forcing allreduce
    # through a switch that is not there: one warning per process.
    env = {"SHOAL_SWITCH": f"127.0.0.1:{free_port()}"}
    proc = launch(2, "log_events.py", "twice", env=env)
    assert proc.stdout.count("OK log twice") == 2
    for rank in (0, 1):
        warnings = [line for line in rank_lines(proc.stderr, rank) if " WARN " in line]
        assert len(warnings) == 1, proc.stderr
        assert "allreduce falls back to host algorithms: in-network aggregation unavailable" in warnings[0]


def test_switch_and_ina_admission_are_logged() -> None:
    with switch() as (addr, _):
        proc = launch(2, "log_events.py", "ina", env={"SHOAL_SWITCH": addr, "SHOAL_LOG": "info"})
        daemon = switch.last  # type: ignore[attr-defined]
    zero = "\n".join(rank_lines(proc.stderr, 0))
    assert re.search(rf"shoal_core::ina: in-network aggregation: 1 tree\(s\): switch {addr} job \d+ \(", zero), zero
    assert " WARN " not in proc.stderr, proc.stderr
    # The daemon logs at info without SHOAL_LOG: its addresses and its jobs.
    out = daemon.stdout.read()
    assert "INFO shoal[switch] shoal_ina::switch: listening: data udp" in out, out
    assert re.search(r"shoal_ina::switch::jobs: admitted job \d+ of tree 0: 2 members", out), out
    assert re.search(r"shoal_ina::switch::jobs: released job \d+", out), out


def test_the_switch_refuses_a_bad_filter() -> None:
    cmd = [sys.executable, "-m", "shoal.cli", "switch", "--listen", f"127.0.0.1:{free_port()}"]
    env = {**os.environ, "SHOAL_LOG": "shoal_ina=chatty"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert 'shoal switch: SHOAL_LOG="shoal_ina=chatty" is not a log filter' in out.stderr, out.stderr
