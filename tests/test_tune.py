"""Tuning tables (docs/tuning.md): SHOAL_TUNE_FILE steers the selector of a
real job, every rank must load the same table, and `shoal tune` writes
tables that load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import init_with, launch, spawn_ranks

from shoal import _shoal
from shoal.tune import Measurement, ranges, table_row, winners

ROW = "allreduce world=2 0-inf:binomial\n"
#: every built-in allreduce algorithm, asked of the registry (not a list kept here)
ALLREDUCE = list(_shoal.algorithms("allreduce"))


def traced_algorithms(trace_dir: Path) -> set[str]:
    """The algorithms of the calls in rank 0's trace."""
    text = (trace_dir / "rank-0.json").read_text()
    events = json.loads(text)
    if isinstance(events, dict):
        events = events["traceEvents"]
    found = {e["args"]["algorithm"] for e in events if e.get("name") == "allreduce" and "args" in e}
    return found - {"(agreement)"}  # what the ranks run, not their agreement on it


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
    proc = init_with({"SHOAL_TUNE_FILE": str(tmp_path / "nope.txt")})
    assert proc.returncode != 0
    assert "nope.txt: cannot read it" in proc.stderr


def oversized_table(path: Path) -> Path:
    """A table that parses but is larger than the 1 MiB a tuning table may have."""
    path.write_text("# padding\n" * (110 << 10) + ROW)
    return path


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda tmp: Path("/dev/zero"), "it is a character device, not a regular file"),
        (lambda tmp: (os.mkfifo(tmp / "fifo.txt"), tmp / "fifo.txt")[1], "it is a FIFO, not a regular file"),
        (lambda tmp: oversized_table(tmp / "big.txt"), "it is 1126433 bytes, more than the 1048576 allowed"),
        (lambda tmp: tmp, "it is a directory, not a regular file"),
    ],
    ids=["dev-zero", "fifo", "oversized", "directory"],
)
def test_a_tune_file_is_a_bounded_regular_file(tmp_path: Path, make: Callable[[Path], Path], problem: str) -> None:
    """Refused at once, naming the variable and the file, in bounded memory:
    /dev/zero was read until the OOM killer took the rank, a FIFO blocked it."""
    path = make(tmp_path)
    proc = init_with({"SHOAL_TUNE_FILE": str(path)}, timeout=30, max_memory=2 << 30)
    assert proc.returncode != 0, proc.stdout
    assert f"SHOAL_TUNE_FILE={path}: cannot read it: {problem}" in proc.stderr, proc.stderr[-2000:]


def test_shoal_tune_quick_writes_a_table_that_loads(tmp_path: Path) -> None:
    """End to end on 2 ranks; the candidates come from the registry at run
    time, so a Python algorithm loaded through SHOAL_ALGORITHMS is measured too."""
    py_ring = Path(__file__).parent.parent / "examples" / "algorithms" / "ring_allreduce.py"
    out = tmp_path / "t.txt"
    cmd = [sys.executable, "-m", "shoal.cli", "tune", "--quick", "-n", "2", "--collectives", "allreduce"]
    cmd += ["--out", str(out), "--no-progress", "--repeats", "3"]
    env = {**os.environ, "SHOAL_ALGORITHMS": str(py_ring)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # py_ring may win: the table loads where SHOAL_ALGORITHMS registers it, as in the ranks
    info = [sys.executable, "-m", "shoal.cli", "info", "--json"]
    shown = subprocess.run(info, env={**env, "SHOAL_TUNE_FILE": str(out)}, capture_output=True, text=True, check=True)
    tuning = json.loads(shown.stdout)["tuning"]
    assert tuning["error"] is None
    rows = tuning["tables"][0]["rows"]
    assert len(rows) == 1 and rows[0].startswith("allreduce world=2 transport=shm cpus=")
    assert rows[0].split()[4].startswith("0-") and rows[0].endswith(tuple(f"-inf:{a}" for a in ALLREDUCE + ["py_ring"]))
    raw = json.loads(out.with_suffix(".json").read_text())
    measured = {m["algo"] for m in raw["measurements"]}
    assert measured == {*ALLREDUCE, "py_ring"}
    assert all(m["errors"] == 0 and m["time_us"] > 0 for m in raw["measurements"])
    # A job given the table follows its row (tune_job's call: 4096 float32 = 16 KiB).
    job = launch(2, "tune_job.py", env={"SHOAL_TUNE_FILE": str(out), "SHOAL_ALGORITHMS": str(py_ring)})
    assert f"chosen={algorithm_for(rows[0], 16384)}" in job.stdout


def algorithm_for(row: str, nbytes: int) -> str:
    """The algorithm a row's ranges name for `nbytes` (sizes as `shoal tune` writes them)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

    def size(text: str) -> float:
        if text == "inf":
            return float("inf")
        return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)

    for word in row.split()[4:]:
        span, algo = word.split(":")
        lo, hi = span.split("-")
        if size(lo) <= nbytes < size(hi):
            return algo
    raise AssertionError(f"no range of {row!r} holds {nbytes}")


def test_shoal_tune_from_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "shoal.cli", "tune", "--from", str(fifo), "--out", str(tmp_path / "t.txt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"shoal tune: cannot read {fifo}: it is a FIFO, not a regular file"


def test_shoal_tune_refuses_a_bad_grid(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "shoal.cli", "tune", "--collectives", "allreduse", "--out", str(tmp_path / "t")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown collective(s) allreduse" in proc.stderr


def test_shoal_info_shows_the_tables_in_force(tmp_path: Path) -> None:
    table = tmp_path / "t.txt"
    table.write_text(ROW)
    env = {**os.environ, "SHOAL_TUNE_FILE": str(table)}
    info = [sys.executable, "-m", "shoal.cli", "info"]
    doc = json.loads(subprocess.run([*info, "--json"], env=env, capture_output=True, text=True, check=True).stdout)
    tables = doc["tuning"]["tables"]
    assert [t["source"] for t in tables] == [str(table), "built-in"]
    assert tables[0]["rows"] == [ROW.strip()] and doc["tuning"]["error"] is None
    text = subprocess.run(info, env=env, capture_output=True, text=True, check=True).stdout
    assert f"  {table}: 1 row(s)\n    {ROW.strip()}\n" in text
    table.write_text("allreduce 0-inf:nope\n")
    doc = json.loads(subprocess.run([*info, "--json"], env=env, capture_output=True, text=True, check=True).stdout)
    assert "line 1: unknown allreduce algorithm 'nope'" in doc["tuning"]["error"]
    assert [t["source"] for t in doc["tuning"]["tables"]] == ["built-in"]


def test_info_without_the_builtin_table(tmp_path: Path) -> None:
    table = tmp_path / "t.txt"
    table.write_text(ROW)
    env = {**os.environ, "SHOAL_TUNE_FILE": str(table), "SHOAL_TUNE_BUILTIN": "0"}
    cmd = [sys.executable, "-m", "shoal.cli", "info", "--json"]
    doc = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
    assert [t["source"] for t in doc["tuning"]["tables"]] == [str(table)]


def point(size: int, algo: str, us: float, errors: int = 0) -> Measurement:
    return Measurement("allreduce", 2, algo, size, size, us, [us], errors)


def test_winners_merge_ranges_and_ignore_noise_and_wrong_results() -> None:
    points = [
        point(8, "a", 10.0), point(8, "b", 12.0),
        point(64, "a", 10.4), point(64, "b", 10.0),  # b faster by 4%: within 5%, a stays
        point(1024, "a", 20.0), point(1024, "b", 10.0),  # b clearly faster
        point(4096, "a", 5.0, errors=3), point(4096, "b", 9.0),  # a wrong: never a winner
        point(65536, "a", 5.0), point(65536, "b", 9.0),
    ]  # fmt: skip
    wins = winners(points, 0.05)
    assert wins == [(8, "a"), (64, "a"), (1024, "b"), (4096, "b"), (65536, "a")]
    assert winners(points, 0.0)[1] == (64, "b")
    # boundaries at the geometric middle, a power of two where one lies between
    assert ranges(wins) == [(0, 256, "a"), (256, 16384, "b"), (16384, None, "a")]
    assert table_row("allreduce", 2, "shm", 2, wins) == (
        "allreduce world=2 transport=shm cpus=2 0-256:a 256-16K:b 16K-inf:a"
    )
