"""Tests of the ``shoal`` command (python/shoal/cli.py) and ``shoal info`` (python/shoal/info.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
from shoal import cli, info


def shoal_cmd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal.cli", *args], capture_output=True, text=True, timeout=60, env=env
    )


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher or SHOAL_ variable, plus `extra`."""
    launcher = ("SHOAL_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "SLURM_", "OMPI_", "TORCHELASTIC_", "PMIX_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(launcher)}, **extra}


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    proc = shoal_cmd(flag)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"shoal {shoal.__version__}"


def test_every_command_is_listed_and_handled() -> None:
    assert set(cli.COMMANDS) == set(cli.HANDLERS)
    assert all(f"  {name} " in cli.USAGE for name in cli.COMMANDS)


@pytest.mark.parametrize(
    ("typo", "meant"), [("rnu", "run"), ("inof", "info"), ("bnech", "bench"), ("secert", "secret")]
)
def test_a_mistyped_command_gets_a_suggestion(typo: str, meant: str) -> None:
    proc = shoal_cmd(typo)
    assert proc.returncode == 2
    assert f"unknown command {typo!r}; did you mean {meant!r}?" in proc.stderr, proc.stderr


def test_no_suggestion_for_nonsense() -> None:
    assert cli.did_you_mean("zzzzzz", cli.COMMANDS) == ""


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["allredcue"], "did you mean 'allreduce'?"),
        (["allreduce", "--algo", "rnig"], "did you mean 'ring'?"),
        (["allgather", "--algo", "brcuk"], "did you mean 'bruck'?"),
        (["allreduce", "--against", "glo"], "did you mean 'gloo'?"),
    ],
)
def test_bench_suggests_collectives_algorithms_and_competitors(args: list[str], hint: str) -> None:
    proc = shoal_cmd("bench", *args, "--no-progress")
    assert proc.returncode == 2
    assert hint in proc.stderr, proc.stderr


def test_info_text_lists_everything() -> None:
    proc = shoal_cmd("info", env=clean_env(SHOAL_CHUNK_BYTES="4096"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for v in shoal._shoal.config_variables():
        assert v["name"] in out
    assert "SHOAL_CHUNK_BYTES" in out and "4096  [env]" in out
    for part in ("algorithms:", "transports:", "cma (single-copy shm):", "/dev/shm:", "congestion control:"):
        assert part in out, out
    assert "launcher: default (rank 0 of 1" in out
    assert "ina: no switch configured" in out
    assert "configuration (valid):" in out


def test_info_says_what_init_would_refuse() -> None:
    proc = shoal_cmd("info", env=clean_env(SHOAL_PLAN_CACHE="lots"))
    assert proc.returncode == 0, proc.stderr
    assert 'configuration (invalid, init fails: SHOAL_PLAN_CACHE="lots" must be a whole number' in proc.stdout
    assert info_json(SHOAL_PLAN_CACHE="0")["config_error"].startswith('SHOAL_PLAN_CACHE="0" must be at least 1')
    assert info_json()["config_error"] is None


def info_json(**env: str) -> dict:
    proc = shoal_cmd("info", "--json", env=clean_env(**env))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_info_json_variables_have_value_and_source() -> None:
    doc = info_json(SHOAL_TIMEOUT="12", SHOAL_ALGO="   ")
    rows = {v["name"]: v for v in doc["variables"]}
    assert set(rows) == {v["name"] for v in shoal._shoal.config_variables()}
    assert rows["SHOAL_TIMEOUT"] == {**rows["SHOAL_TIMEOUT"], "value": "12", "source": "env", "default": "300"}
    # Blank is the default, as shoal reads it.
    assert rows["SHOAL_ALGO"]["source"] == "default"
    assert rows["SHOAL_CHUNK_BYTES"]["value"] == "1048576" and rows["SHOAL_CHUNK_BYTES"]["source"] == "default"
    assert doc["version"] == shoal.__version__
    # algorithms other tests registered in this process come after the built-in ones
    listed = doc["algorithms"]["allreduce"]
    assert "ring" in listed and shoal.algorithms("allreduce")[: len(listed)] == listed


def test_info_json_capabilities_come_from_the_kernel() -> None:
    caps = info_json()["capabilities"]
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    if available.exists():
        assert caps["congestion_control"]["available"] == available.read_text().split()
    st = os.statvfs("/dev/shm")
    assert caps["dev_shm"]["size_bytes"] == st.f_blocks * st.f_frsize
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    expected = int(scope.read_text()) if scope.exists() else None
    assert caps["cma"]["ptrace_scope"] == expected


@pytest.mark.parametrize(
    ("scope", "euid", "allowed"),
    [(None, 1000, True), ("0", 1000, True), ("1", 1000, False), ("1", 0, True), ("2", 1000, False), ("3", 0, False)],
)
def test_cma_follows_ptrace_scope(scope: str | None, euid: int, allowed: bool) -> None:
    assert info.cma(scope, euid)["allowed"] is allowed


def test_congestion_control_in_effect() -> None:
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
    if not available.exists():
        pytest.skip("no /proc/sys/net/ipv4")
    names = available.read_text().split()
    assert info.congestion_control(names[0], named=True)["shoal"] == names[0]
    lacking = info.congestion_control("nosuchcc", named=True)["shoal"]
    assert lacking.startswith("none: the kernel lacks nosuchcc")
    system = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    assert info.congestion_control("system", named=True)["shoal"] == system


@pytest.mark.parametrize(
    ("env", "source", "port"),
    [
        ({}, "default", None),
        ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "4000"}, "torchrun", 4000),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "4000", "SHOAL_JOB_ID": "j"},
            "shoal",
            4000,
        ),
        # torchrun's agent serves torch's store on MASTER_PORT; shoal's moves one up.
        (
            {
                "RANK": "0",
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "h",
                "MASTER_PORT": "4000",
                "TORCHELASTIC_USE_AGENT_STORE": "1",
            },
            "torchrun",
            4001,
        ),
        (
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "n[1-2]"},
            "slurm",
            21234,
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "5000"},
            "openmpi",
            5000,
        ),
    ],
)
def test_info_detects_the_launcher(env: dict[str, str], source: str, port: int | None) -> None:
    launcher = info_json(**env)["launcher"]
    assert launcher["source"] == source, launcher
    assert launcher["master_port"] == port, launcher


def test_info_reports_an_inconsistent_launcher_environment() -> None:
    launcher = info_json(RANK="3", WORLD_SIZE="2", MASTER_ADDR="h", MASTER_PORT="1")["launcher"]
    assert launcher["source"] == "invalid" and "RANK" in launcher["error"], launcher


def test_info_shows_ina_switches() -> None:
    doc = info_json(SHOAL_SWITCH="10.0.0.9:9000, 10.0.0.10:9000", SHOAL_INA_INT32="1")
    assert doc["ina"] == {**doc["ina"], "configured": True, "switches": ["10.0.0.9:9000", "10.0.0.10:9000"]}
    assert doc["ina"]["int32"] == "1"


def test_info_into_a_closed_pipe_is_not_an_error() -> None:
    # `shoal info | head -1`: the reader leaves early; no BrokenPipeError traceback.
    res = subprocess.run(
        f"{sys.executable} -m shoal.cli info | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.stdout.startswith("shoal "), res.stdout
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "command, why",
    [(["/nonexistent/train.py"], "no such file"), (["no-such-program-shoal"], "not found on PATH")],
)
def test_run_refuses_a_missing_program_before_starting_ranks(command: list[str], why: str) -> None:
    res = shoal_cmd("run", "-n", "2", *command)
    assert res.returncode == 2, res
    assert why in res.stderr and command[0] in res.stderr, res.stderr
    assert "[0]" not in res.stderr + res.stdout, "a rank was started"
