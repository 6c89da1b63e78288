"""Tests of ``shoal sim validate`` (python/shoal/sim/validate.py): simulated vs measured testbed times.

The saved-measurement test runs anywhere the extension is built. The live
one brings up a real 2-host testbed (network namespaces, veth, tc) and is
skipped, with the reason, where tests/test_testbed.py skips its testbeds
(no root, no iproute2, no namespaces).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_testbed import NO_NETNS, needs_netns, tbcli

from shoal.sim import plan, validate

NAME = f"shoal-v{os.getpid()}"

#: 1 MiB ring allreduce on 2 ranks: each rank sends half the buffer twice (reduce-scatter, allgather).
RING2_WIRE_S = 2 * (1 << 19) * 8 / 1e9


def run_validate(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal.sim.validate", *args], capture_output=True, text=True, timeout=timeout
    )


def test_saved_measurements_table(tmp_path: Path) -> None:
    proc = run_validate("--sizes", "1M", "--algos", "ring,ina", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "| allreduce ring 4x1 | 1 MiB |" in proc.stdout
    rows = json.loads((tmp_path / "validate.json").read_text())["rows"]
    assert {r["algo"] for r in rows} == {"ring", "ina"} and all(r["bytes"] == 1 << 20 for r in rows)
    for r in rows:
        for model in ("packet", "packet+o", "flow"):
            assert r[f"{model}_s"] > 0
            assert r[f"{model}_err"] == pytest.approx((r[f"{model}_s"] - r["median_s"]) / r["median_s"])
    by_algo = {r["algo"]: r for r in rows}
    # The host overhead lengthens the plan-based allreduce; the aggregation protocol has no messages to charge.
    assert by_algo["ring"]["packet+o_s"] > by_algo["ring"]["packet_s"]
    assert by_algo["ina"]["packet+o_s"] == by_algo["ina"]["packet_s"]


def test_bad_arguments_are_named() -> None:
    proc = run_validate("--engines", "quantum")
    assert proc.returncode == 2 and "unknown engine" in proc.stderr
    with pytest.raises(ValueError, match="bad size"):
        validate.parse_size("lots")
    assert validate.parse_size("4MiB") == 4 << 20 and validate.parse_size("1M") == 1 << 20
    with pytest.raises(ValueError, match="packet engine only"):
        plan(
            "allreduce", algo="ring", ranks=2, size="1MiB", topology="star:hosts=2", engine="flow", host_overhead="1us"
        )


def test_host_overhead_adds_per_step() -> None:
    # 2 ranks, 2 steps of one message each: the overhead is paid twice on the critical path.
    args: dict[str, Any] = {"algo": "ring", "ranks": 2, "size": "1MiB", "topology": "star:hosts=2", "link": "1gbit"}
    base = plan("allreduce", **args)["time_s"]
    slow = plan("allreduce", **args, host_overhead="500us")
    assert slow["host_overhead_s"] == pytest.approx(500e-6)
    assert slow["time_s"] - base == pytest.approx(2 * 500e-6, rel=0.02)


@needs_netns
def test_live_two_hosts(tmp_path: Path) -> None:
    assert NO_NETNS is None
    up = tbcli("up", "--name", NAME, "--hosts", "2", "--link", "1gbit")
    try:
        assert up.returncode == 0, up.stderr
        proc = run_validate(
            "--testbed", NAME, "--hosts", "2", "--sizes", "1M", "--algos", "ring", "--repeats", "3", "--iters", "2",
            "--engines", "packet", "--out", str(tmp_path),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        report = json.loads((tmp_path / "validate.json").read_text())
        (row,) = report["rows"]
        (calibration,) = report["calibration"]
        assert calibration["steps"] == 2 and 0 < calibration["host_overhead_s"] < 0.1
        assert row["packet+o_s"] > row["packet_s"]
        assert (row["algo"], row["hosts"], row["bytes"], row["errors"]) == ("ring", 2, 1 << 20, 0)
        # Neither the testbed nor the simulator can beat the wire; both stay within sane reach of it.
        assert 0.95 * RING2_WIRE_S < row["median_s"] < 20 * RING2_WIRE_S
        assert RING2_WIRE_S < row["packet_s"] < 1.3 * RING2_WIRE_S
        assert "| allreduce ring 2x1 | 1 MiB |" in proc.stdout
    finally:
        tbcli("down", "--name", NAME)
