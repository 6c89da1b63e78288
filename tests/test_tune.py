"""Tuning tables (docs/tuning.md): SHOAL_TUNE_FILE steers the selector of a
real job, every rank must load the same table, and `shoal tune` writes
tables that load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import launch, spawn_ranks
from shoal import _shoal

ROW = "allreduce world=2 0-inf:binomial\n"


def traced_algorithms(trace_dir: Path) -> set[str]:
    """The algorithms of the calls in rank 0's trace."""
    text = (trace_dir / "rank-0.json").read_text()
    events = json.loads(text)
    if isinstance(events, dict):
        events = events["traceEvents"]
    return {e["args"]["algorithm"] for e in events if e.get("name") == "allreduce" and "args" in e}


def test_tables_list_the_file_before_the_builtin(tmp_path: Path) -> None:
    table = tmp_path / "t.txt"
    table.write_text("# mine\n" + "allreduce  world=2 0-64K:ring 64K-inf:rabenseifner\n")
    got = _shoal.tune_tables(str(table))
    sources = [t["source"] for t in got["tables"]]
    assert sources == [str(table), "built-in"]
    assert got["tables"][0]["rows"] == ["allreduce world=2 0-64K:ring 64K-inf:rabenseifner"]


def test_a_bad_table_names_file_line_and_problem(tmp_path: Path) -> None:
    table = tmp_path / "bad.txt"
    table.write_text("allreduce 0-inf:ring\nbroadcast 0-1M:binomial 512K-inf:pipelined_chain\n")
    with pytest.raises(ValueError, match=r"bad.txt, line 2: range '512K-inf:pipelined_chain' overlaps"):
        _shoal.tune_tables(str(table))


def test_the_tune_file_changes_what_a_job_runs(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    without = launch(2, "tune_job.py", env={"SHOAL_TRACE": str(trace / "auto")})
    assert "chosen=binomial" not in without.stdout, "pick a row the cost model would not choose"
    table = tmp_path / "t.txt"
    table.write_text(ROW)
    env = {"SHOAL_TUNE_FILE": str(table), "SHOAL_TRACE": str(trace / "tuned")}
    tuned = launch(2, "tune_job.py", env=env)
    assert "chosen=binomial" in tuned.stdout
    assert traced_algorithms(trace / "tuned") == {"binomial"}
    assert "binomial" not in traced_algorithms(trace / "auto")


def test_a_table_on_one_rank_only_fails_init_naming_the_ranks(tmp_path: Path) -> None:
    table = tmp_path / "t.txt"
    table.write_text(ROW)
    env = {k: v for k, v in os.environ.items() if k != "SHOAL_TUNE_FILE"}
    procs = spawn_ranks(
        2, "tune_job.py", env=env, timeout=60, rank_env=lambda r: {"SHOAL_TUNE_FILE": str(table)} if r == 1 else {}
    )
    for p in procs:
        assert p.returncode != 0, p.stdout
        assert "different tuning tables" in p.stderr, p.stderr[-2000:]
        assert "ranks [0] table digest" in p.stderr and "ranks [1] table digest" in p.stderr


def test_a_missing_tune_file_fails_init(tmp_path: Path) -> None:
    code = "import shoal; shoal.init()"
    env = {**os.environ, "SHOAL_TUNE_FILE": str(tmp_path / "nope.txt")}
    env.pop("RANK", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "nope.txt: cannot read it" in proc.stderr
