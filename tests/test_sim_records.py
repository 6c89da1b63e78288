"""What ``shoal sim run`` writes for a researcher: flows.csv, iterations.csv and
links.csv agree with report.json's summaries; a degenerate run warns; a
scenario job runs an algorithm registered from Python."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import builtin_ring_in_python

from shoal import algo
from shoal.sim.run import read_csv, run_pairs

SCENARIO = [
    ("topology", "fattree:k=4"),
    ("duration", "2s"),
    ("seed", "5"),
    ("background.load", "0.2"),
    ("background.distribution", "websearch"),
    ("jobs.0.workers", "4"),
    ("jobs.0.model", "resnet50"),
    ("jobs.0.algorithm", "ring"),
    ("jobs.1.workers", "4"),
    ("jobs.1.model", "vgg16"),
    ("jobs.1.algorithm", "panama"),
]


def percentile(values: list[float], p: float) -> float:
    """Nearest rank, as the report's summaries."""
    ranked = sorted(values)
    return ranked[min(max(math.ceil(p * len(ranked)), 1), len(ranked)) - 1]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], Path]:
    out = tmp_path_factory.mktemp("run")
    return run_pairs(SCENARIO, out=out), out


def test_flows_csv_agrees_with_the_report(records: tuple[dict[str, object], Path]) -> None:
    report, out = records
    rows = read_csv(out / "flows.csv")
    assert list(rows[0]) == ["start_s", "bytes", "fct_s", "src", "dst"]
    background = report["background"]
    assert isinstance(background, dict)
    assert len(rows) == background["flows"] - background["unfinished"] > 100
    fct = [float(r["fct_s"]) for r in rows]
    summary = background["fct_s"]["all"]
    assert summary["count"] == len(fct)
    assert math.isclose(summary["mean"], sum(fct) / len(fct), rel_tol=1e-9)
    assert math.isclose(summary["p99"], percentile(fct, 0.99), rel_tol=1e-9)
    # The report's buckets are PANAMA's (short < 40 MB), with flows < 100 KB apart as `small`.
    short = [float(r["fct_s"]) for r in rows if int(r["bytes"]) <= report["short_max_bytes"]]
    assert math.isclose(background["fct_s"]["short"]["p99"], percentile(short, 0.99), rel_tol=1e-9)
    small = [float(r["fct_s"]) for r in rows if int(r["bytes"]) < 100_000]
    assert math.isclose(background["fct_s"]["small"]["p99"], percentile(small, 0.99), rel_tol=1e-9)
    for r in rows:
        assert r["src"] != r["dst"] and 0 <= int(r["src"]) < 16
        assert 0 <= float(r["start_s"]) <= 2.0 and float(r["fct_s"]) > 0


def test_iterations_csv_agrees_with_the_report(records: tuple[dict[str, object], Path]) -> None:
    report, out = records
    rows = read_csv(out / "iterations.csv")
    assert list(rows[0]) == ["job", "model", "workers", "algorithm", "iteration", "start_s", "time_s"]
    jobs = report["jobs"]
    assert isinstance(jobs, list)
    for j, job in enumerate(jobs):
        mine = [r for r in rows if int(r["job"]) == j]
        assert [float(r["time_s"]) for r in mine] == pytest.approx(job["iterations_s"], rel=1e-12)
        assert {(r["model"], int(r["workers"]), r["algorithm"]) for r in mine} == {
            (job["model"], job["workers"], job["algorithm"])
        }
        assert [int(r["iteration"]) for r in mine] == list(range(len(mine)))
        # An iteration starts where the one before ended.
        for a, b in zip(mine, mine[1:]):
            assert float(b["start_s"]) == pytest.approx(float(a["start_s"]) + float(a["time_s"]), rel=1e-9)
    every = [float(r["time_s"]) for r in rows]
    assert report["mean_iteration_s"] == pytest.approx(sum(every) / len(every), rel=1e-9)


def test_links_csv_holds_the_busiest_links_over_time(records: tuple[dict[str, object], Path]) -> None:
    report, out = records
    rows = read_csv(out / "links.csv")
    assert list(rows[0]) == ["link", "from", "to", "start_s", "end_s", "utilisation"]
    links = {r["link"] for r in rows}
    assert len(links) == 10
    assert len(rows) == 10 * 100
    util = report["link_utilisation"]
    assert isinstance(util, dict)
    # The busiest link's mean over the intervals is the report's maximum. (An
    # interval may read a few % above 1: the flow engine counts an active
    # flow's bytes at its current rate, not as delivered; docs/sim.md.)
    for link in links:
        series = [float(r["utilisation"]) for r in rows if r["link"] == link]
        assert all(0 <= u < 1.2 for u in series)
    busiest = max(sum(float(r["utilisation"]) for r in rows if r["link"] == link) / 100 for link in links)
    assert busiest == pytest.approx(util["max"], rel=1e-6)
    assert report["warnings"] == []


def test_a_run_in_which_no_iteration_finishes_warns(tmp_path: Path) -> None:
    short = [("duration", "50ms") if k == "duration" else (k, v) for k, v in SCENARIO]
    report = run_pairs(short)
    assert all(not j["iterations_s"] for j in report["jobs"])
    assert any("no job finished an iteration" in w for w in report["warnings"])


def test_carried_load_far_below_offered_warns() -> None:
    # Datamining's flows reach 1 GB: in 20 ms most offered bytes are still in flight.
    pairs = [("topology", "fattree:k=4"), ("duration", "20ms"), ("seed", "1")]
    pairs += [("background.load", "0.5"), ("background.distribution", "datamining")]
    report = run_pairs(pairs)
    assert any("far below" in w for w in report["warnings"]), report["warnings"]


def test_the_command_writes_the_files_and_prints_the_warning(tmp_path: Path) -> None:
    config = tmp_path / "short.toml"
    config.write_text('topology = "fattree:k=4"\nduration = "50ms"\n[[jobs]]\nworkers = 4\nmodel = "vgg16"\n')
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "shoal.cli", "sim", "run", str(config), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "warning: no job finished an iteration" in proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["warnings"] and (out / "iterations.csv").read_text().count("\n") == 1
    assert (out / "flows.csv").exists() and (out / "links.csv").exists()


@pytest.fixture
def _records_py_ring() -> None:
    """Registered when this file's tests run, not when pytest imports it: a
    registration lasts for the process, and other files (test_cli, test_tune)
    compare this process's algorithm lists with a fresh process's."""
    algo.register("allreduce", "records_py_ring")(builtin_ring_in_python)


@pytest.mark.usefixtures("_records_py_ring")
def test_a_scenario_job_runs_a_python_algorithm_as_the_builtin_one() -> None:
    job = [("topology", "fattree:k=4"), ("duration", "1s"), ("jobs.0.workers", "4"), ("jobs.0.model", "resnet50")]
    builtin = run_pairs([*job, ("jobs.0.algorithm", "ring")])
    python = run_pairs([*job, ("jobs.0.algorithm", "records_py_ring")])
    assert python["jobs"][0]["algorithm"] == "records_py_ring"
    assert python["jobs"][0]["iterations_s"] == builtin["jobs"][0]["iterations_s"]


def test_a_degenerate_panama_sweep_warns_and_every_point_has_its_records(tmp_path: Path) -> None:
    from shoal.sim.panama import fig8, point_dir

    # k=4 for 20 ms: no job finishes an iteration (computing takes 0.17-0.7 s).
    result = fig8(4, "20ms", (1,), (0.6,), ("ideal", "ring", "panama"), jobs=2, records=tmp_path)
    assert any("no job finished an iteration" in w for w in result["warnings"]), result["warnings"]
    for where in (point_dir(tmp_path, "ring", 0.6, 1), point_dir(tmp_path, "panama", 0.6, 1)):
        assert [p.name for p in sorted(where.iterdir())] == ["flows.csv", "iterations.csv", "links.csv"]
    ideal = point_dir(tmp_path, "ideal", 0.6, 1)
    assert (ideal / "background" / "flows.csv").exists() and (ideal / "jobs" / "iterations.csv").exists()
