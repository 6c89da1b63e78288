"""``shoal sim run`` and ``shoal sim panama`` end to end (flow engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.sim.run import run_pairs

TINY = """
topology = "fattree:k=4"
duration = "3s"
seed = 3

[background]
load = 0.2
distribution = ["websearch", "datamining"]

[[jobs]]
workers = 4
model = "resnet50"
algorithm = "ring"

[[jobs]]
workers = 4
model = "vgg16"
algorithm = "panama"
trees = 2
"""


def test_tiny_scenario_through_the_cli(tmp_path: Path) -> None:
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "shoal.cli", "sim", "run", str(config), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["background"]["flows"] > 100
    assert report["background"]["fct_s"]["short"]["p99"] > 0
    assert [j["algorithm"] for j in report["jobs"]] == ["ring", "panama"]
    # Every job iterated, no faster than its compute time.
    assert all(j["iterations_s"] and j["mean_iteration_s"] > 0.29 for j in report["jobs"])
    assert "short p99 FCT" in proc.stdout


def test_a_summary_figure_with_nothing_behind_it_says_so(tmp_path: Path) -> None:
    """50 ms: no long flow and no iteration finishes; the summary line printed
    "long-flow throughput 0.00 Gb/s" and "mean iteration 0.000 s" as if measured."""
    config = tmp_path / "short.toml"
    config.write_text(TINY.replace('duration = "3s"', 'duration = "50ms"').replace("datamining", "websearch"))
    cmd = [sys.executable, "-m", "shoal.cli", "sim", "run", str(config), "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "no long flow finished" in proc.stdout and "no iteration finished" in proc.stdout, proc.stdout
    assert "0.00 Gb/s" not in proc.stdout and "mean iteration" not in proc.stdout


def test_bad_scenario_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scenario key"):
        run_pairs([("topolgy", "fattree:k=4")])
    # A size, rate or duration that does not parse is named with its key.
    with pytest.raises(ValueError, match="^switch_memory: size '3 parsecs': unknown unit"):
        run_pairs([("switch_memory", "3 parsecs")])
    config = tmp_path / "bad.toml"
    config.write_text('topology = "fattree:k=4"\n[[jobs]]\nworkers = 4\nmodel = "gpt"\n')
    cmd = [sys.executable, "-m", "shoal.cli", "sim", "run", str(config), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown model" in proc.stderr
    # A misspelt key is named with the file and its line (Rust parses the file: one parser).
    config.write_text('topology = "fattree:k=4"\n[[jobs]]\nworkers = 4\nmodle = "vgg16"\n')
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f'shoal sim run: {config}: line 4: unknown scenario key "jobs.0.modle"'


def test_overrides_go_over_the_file(tmp_path: Path) -> None:
    """``run_pairs`` with a file: the pairs are set over it (what ``--engine`` does)."""
    config = tmp_path / "s.toml"
    config.write_text('topology = "star:hosts=4"\nduration = "5ms"\nengine = "packet"\n[background]\nload = 0.1\n')
    report = run_pairs([("engine", "flow"), ("background.load", "0.2")], config=config)
    assert report["engine"] == "flow" and report["background_load"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match=r"s\.toml: background\.load: 2 must be between 0 and 1"):
        run_pairs([("background.load", "2")], config=config)


def test_a_scenario_must_be_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "scenario.toml"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "shoal.cli", "sim", "run", str(fifo), "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"shoal sim run: {fifo}: it is a FIFO, not a regular file"


def test_panama_fairness_figure() -> None:
    from shoal.sim.panama import fig10

    series = fig10()
    fair, unfair = series["panama"], series["no_congestion_control"]
    i = fair["time_s"].index(0.5)
    assert fair["background_bps"][i] == pytest.approx(5e9)
    assert unfair["background_bps"][i] < 1e9


def test_fig9_runs_a_single_tree_on_either_engine() -> None:
    # Fig. 9's single trees (Agg1..Agg4) run on the packet engine too (it refused them before). The first,
    # partial iteration is not counted: 2 s hold one whole; a case that finished none is None, not 0.
    from shoal.sim.panama import fig9_pairs, fig9_time

    for engine in ("flow", "packet"):
        report = run_pairs(fig9_pairs(1, "panama-agg2", 0, engine, "2s"))
        assert report["engine"] == engine
        assert report["jobs"][0]["iterations_s"], engine
        # Alone on the network, one tree carries VGG16's 553 MB at the NICs' 10 Gb/s: ~0.45 s.
        assert 0.4 < (fig9_time(report) or 0.0) < 0.6, (engine, fig9_time(report))
    assert fig9_time(run_pairs(fig9_pairs(1, "ring", 0, "flow", "0.3s"))) is None
    with pytest.raises(ValueError, match="unknown Fig. 9 case 'panama-agg5'"):
        fig9_pairs(1, "panama-agg5", 0)


def test_panama_command_passes_fig9s_engine_and_duration(tmp_path: Path) -> None:
    from shoal.sim.panama import FIG9_CASES, main

    assert main(["--out", str(tmp_path), "--figs", "9", "--fig9-engine", "flow", "--fig9-duration", "2s"]) == 0
    f9 = json.loads((tmp_path / "fig9.json").read_text())
    assert (f9["engine"], f9["duration"]) == ("flow", "2s")
    assert list(f9["mean_comm_s"]) == list(FIG9_CASES)
    # In 2 s ring under 12 long flows (~3.2 s a round on the flow engine) finishes no whole iteration.
    assert f9["mean_comm_s"]["ring"][-1] is None
    assert f9["mean_comm_s"]["panama"][0] == pytest.approx(0.458, abs=0.01)
