"""``shoal sim run --engine packet``: a scenario on the packet engine, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = """
topology = "fattree:k=4"
duration = "450ms"
warmup = "50ms"
engine = "flow"

[background]
load = 0.1
distribution = ["websearch"]

[pfc]
enabled = true

[[jobs]]
workers = 4
model = "googlenet"
algorithm = "ring"
"""


def test_packet_engine_scenario_through_the_cli(tmp_path: Path) -> None:
    config = tmp_path / "small.toml"
    config.write_text(SMALL)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "shoal.cli", "sim", "run", str(config), "--out", str(out), "--engine", "packet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["engine"] == "packet" and report["warmup_s"] == pytest.approx(0.05)
    # PFC is on: a lossless fabric.
    assert report["counters"]["drops"] == 0
    assert report["short_max_bytes"] == 40_000_000 - 1
    assert report["background"]["fct_s"]["short"]["count"] > 10
    assert 0.05 < report["carried_load"] < 1.0
    assert report["jobs"][0]["iterations_s"] and report["jobs"][0]["aggregated"] is False
    assert "carried" in proc.stdout
    # The packet engine writes the flow engine's records (docs/sim.md, "Files"), the warm-up left out.
    from shoal.sim.run import read_csv

    flows = read_csv(out / "flows.csv")
    assert len(flows) == report["background"]["flows"] - report["background"]["unfinished"]
    assert all(float(f["start_s"]) >= 0.05 for f in flows)
    iterations = read_csv(out / "iterations.csv")
    assert [float(i["time_s"]) for i in iterations] == report["jobs"][0]["iterations_s"]
    assert len(read_csv(out / "links.csv")) == 10 * 100
    assert report["warnings"] == []


def test_the_flow_engine_refuses_pfc(tmp_path: Path) -> None:
    from shoal.sim.run import run_pairs

    with pytest.raises(ValueError, match="pfc needs engine"):
        run_pairs([("pfc.enabled", "true")])
