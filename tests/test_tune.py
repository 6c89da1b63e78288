"""Tuning tables (docs/tuning.md): SHOAL_TUNE_FILE steers the selector of a
real job, every rank must load the same table, and `shoal tune` writes
tables that load."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import init_with, launch, spawn_ranks

from shoal import _shoal
from shoal.tune import Measurement, Verdict, Win, ranges, table_row, verdicts, winners

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
    assert rows[0].split()[4] == f"vendor={_shoal.tune_tables('')['vendor']}", rows[0]
    last = re.fullmatch(r"\d+[KMG]?-inf:(\w+),margin=[\d.]+%,noise=[\d.]+%(,beats=[\w+]+)?", rows[0].split()[-1])
    assert rows[0].split()[5].startswith("0-") and last and last[1] in [*ALLREDUCE, "py_ring"], rows[0]
    raw = json.loads(out.with_suffix(".json").read_text())
    measured = {m["algo"] for m in raw["measurements"]}
    assert measured == {*ALLREDUCE, "py_ring"}
    assert all(m["errors"] == 0 and m["time_us"] > 0 for m in raw["measurements"])
    # A job given the table follows its row where the win is beyond the noise (tune_job: 16 KiB)
    algo, established = algorithm_for(rows[0], 16384)
    if established:
        job = launch(2, "tune_job.py", env={"SHOAL_TUNE_FILE": str(out), "SHOAL_ALGORITHMS": str(py_ring)})
        assert f"chosen={algo}" in job.stdout


def algorithm_for(row: str, nbytes: int) -> tuple[str, bool]:
    """The algorithm a row's ranges name for `nbytes` (sizes as `shoal tune` writes them),
    and whether its margin exceeds its noise."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

    def size(text: str) -> float:
        if text == "inf":
            return float("inf")
        return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)

    for word in row.split()[5:]:  # after the conditions (world, transport, cpus, vendor)
        span, measured = word.split(":")
        algo, margin, noise = measured.split(",")[:3]  # then maybe beats=...
        lo, hi = span.split("-")
        if size(lo) <= nbytes < size(hi):
            return algo, float(margin[len("margin=") : -1]) > float(noise[len("noise=") : -1])
    raise AssertionError(f"no range of {row!r} holds {nbytes}")


def test_shoal_tune_from_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "shoal.cli", "tune", "--from", str(fifo), "--out", str(tmp_path / "t.txt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"shoal tune: cannot read {fifo}: it is a FIFO, not a regular file"


def test_shoal_tune_from_names_the_cpu_vendor_of_the_measurements(tmp_path: Path) -> None:
    # The quiet 4-rank broadcasts (docs/tuning-data) ran on an AMD host, before the runs
    # recorded a vendor: the rows name the one of the CPU model recorded, not this host's.
    data = Path(__file__).parent.parent / "docs" / "tuning-data" / "2vcpu-dev-vm-broadcast-n4-quiet.json"
    out = tmp_path / "t.txt"
    cmd = [sys.executable, "-m", "shoal.cli", "tune", "--from", str(data), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    assert rows and all(" cpus=2 vendor=amd " in row for row in rows), rows
    # a run that names no vendor and no CPU model is refused, not written for any host
    doc = json.loads(data.read_text())
    doc["machine"]["cpu"] = "?"
    (tmp_path / "anonymous.json").write_text(json.dumps(doc))
    cmd[5] = str(tmp_path / "anonymous.json")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "do not say which CPU vendor they were taken on" in proc.stderr


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


def point(size: int, algo: str, us: float, errors: int = 0, samples: list[float] | None = None) -> Measurement:
    return Measurement("allreduce", 2, algo, size, size, us, samples or [us], errors)


def test_winners_record_margin_and_noise_and_ignore_wrong_results() -> None:
    points = [
        point(8, "a", 10.0, samples=[9.0, 10.0, 12.5]), point(8, "b", 12.0),  # a by 20%, reaching up 25%: not beyond it
        point(64, "a", 10.0), point(64, "b", 13.0),  # a by 30%, repeats alike: the tolerance is the noise
        point(1024, "a", 20.0), point(1024, "b", 10.0),  # b by 100%
        point(4096, "a", 5.0, errors=3), point(4096, "b", 9.0),  # a wrong: never a winner, b alone
        point(65536, "a", 5.0), point(65536, "b", 9.0),
    ]  # fmt: skip
    wins = winners(points, 0.05)
    assert [(w.size, w.algo) for w in wins] == [(8, "a"), (64, "a"), (1024, "b"), (4096, "b"), (65536, "a")]
    assert wins[0].margin == pytest.approx(0.2) and wins[0].noise == pytest.approx(0.25)
    assert not wins[0].established
    assert wins[1] == Win(64, "a", pytest.approx(0.3), 0.05) and wins[1].established  # type: ignore[arg-type]
    assert not wins[3].established  # no runner-up: no margin
    # sizes merge only with the same winner, established or not alike; boundaries at the
    # geometric middle, a power of two where one lies between
    assert [(lo, hi, w.algo) for lo, hi, w in ranges(wins)] == [
        (0, 16, "a"), (16, 256, "a"), (256, 2048, "b"), (2048, 16384, "b"), (16384, None, "a")
    ]  # fmt: skip
    assert table_row("allreduce", 2, "shm", "cpus=2 vendor=amd", wins) == (
        "allreduce world=2 transport=shm cpus=2 vendor=amd 0-16:a,margin=20%,noise=25% 16-256:a,margin=30%,noise=5% "
        "256-2K:b,margin=100%,noise=5% 2K-16K:b,margin=0%,noise=5% 16K-inf:a,margin=80%,noise=5%"
    )


def test_a_tie_lists_the_algorithms_its_winner_beat_beyond_the_noise() -> None:
    # 16 ranks, 1 MiB broadcast on the 16-core machine (docs/benchmarks.md, issue 31): the
    # chains and binomial tied; scatter_allgather, the cost model's pick, lost to all by far.
    points = [
        point(1 << 20, "pipelined_chain", 443.7, samples=[425.2, 443.7, 484.4]),
        point(1 << 20, "topology_aware_pipelined_chain", 456.0, samples=[426.9, 456.0, 486.2]),
        point(1 << 20, "binomial", 498.4, samples=[473.2, 498.4, 517.4]),
        point(1 << 20, "scatter_allgather", 1278.8, samples=[1128.5, 1278.8, 1403.3]),
        point(1 << 24, "binomial", 7068.2, samples=[6872.1, 7068.2, 7744.2]),
        point(1 << 24, "shm_read", 7176.9, samples=[6647.5, 7176.9, 7405.9]),
        point(1 << 24, "pipelined_chain", 9629.5, samples=[8809.7, 9629.5, 9928.4]),
        point(1 << 24, "scatter_allgather", 14450.3, samples=[13648.6, 14450.3, 16897.9]),
    ]
    tie, bigger = winners(points, 0.05)
    assert tie.algo == "pipelined_chain" and not tie.established
    # binomial's 12% is within the 14% the two reach towards each other: not beaten
    assert tie.beats == {"scatter_allgather"}
    assert bigger.algo == "binomial" and bigger.beats == {"pipelined_chain", "scatter_allgather"}
    # an established win needs no list; a range keeps what every one of its sizes beat
    established = winners([point(8, "a", 10.0), point(8, "b", 20.0), point(8, "c", 30.0)], 0.05)
    assert established[0].established and established[0].beats == frozenset()
    assert table_row("broadcast", 16, "shm", "cpus=16 vendor=intel", [tie, bigger]) == (
        "broadcast world=16 transport=shm cpus=16 vendor=intel 0-4M:pipelined_chain,margin=2.8%,noise=15.6%,"
        "beats=scatter_allgather 4M-inf:binomial,margin=1.5%,noise=16.9%,beats=pipelined_chain+scatter_allgather"
    )
    # ties merge only where they beat the same algorithms: the selector reads the list per range
    alike = Win(1 << 22, "pipelined_chain", 0.01, 0.2, frozenset({"scatter_allgather"}))
    [(_, _, merged)] = ranges([tie, alike])
    assert merged.beats == {"scatter_allgather"} and merged.margin == pytest.approx(0.01)
    more = Win(1 << 22, "pipelined_chain", 0.01, 0.2, frozenset({"scatter_allgather", "binomial"}))
    assert [(lo, hi) for lo, hi, _ in ranges([tie, more])] == [(0, 2 << 20), (2 << 20, None)]


def test_a_win_is_judged_by_how_far_the_two_reach_towards_each_other() -> None:
    # Quiet 2-vCPU VM, broadcast 256 KiB, 9 repeats (docs/benchmarks.md): shm_read's slowest repeat
    # is faster than binomial's fastest, yet binomial's slow repeats (27-46 us) spread it 66%,
    # more than the 64% margin. Only the winner's slow side and the runner-up's fast side can
    # close the gap: 18% + 6% of noise, and shm_read's win stands.
    shm_read = [16.1, 17.5, 17.6, 17.6, 17.7, 17.8, 18.2, 18.7, 20.9]
    binomial = [27.3, 27.3, 27.7, 27.7, 29.1, 31.7, 41.8, 44.7, 46.4]
    [win] = winners([point(8, "shm_read", 17.7, samples=shm_read), point(8, "binomial", 29.1, samples=binomial)], 0.05)
    assert win.algo == "shm_read" and win.margin == pytest.approx(29.1 / 17.7 - 1)
    assert win.noise == pytest.approx((20.9 - 17.7) / 17.7 + (29.1 - 27.3) / 29.1)
    assert win.established
    # overlapping repeats do not make a win: the winner's slowest is slower than the runner-up's median
    [close] = winners([point(8, "a", 10.0, samples=[9.0, 10.0, 13.0]), point(8, "b", 12.0)], 0.05)
    assert close.margin == pytest.approx(0.2) and close.noise == pytest.approx(0.3) and not close.established


def measured_row(cpus: int, vendor: str, margin: str, noise: str) -> str:
    """A row as `shoal tune` writes it, naming binomial (not the model's pick for tune_job's call)."""
    return f"allreduce world=2 transport=shm cpus={cpus} vendor={vendor} 0-inf:binomial,margin={margin},noise={noise}\n"


def another_vendor(vendor: str) -> str:
    return "amd" if vendor == "intel" else "intel"


@pytest.mark.parametrize(
    ("cpus_more", "same_vendor", "margin", "noise", "followed"),
    [
        (0, True, "25%", "4%", True),
        (0, True, "4%", "25%", False),
        (0, True, "10%", "10%", False),
        (1, True, "25%", "4%", False),
        (0, False, "25%", "4%", False),
    ],
    ids=["clear-win", "within-noise", "margin-equals-noise", "another-cpu-count", "another-cpu-vendor"],
)
def test_a_measured_row_is_followed_only_beyond_its_noise_on_its_machine_class(
    tmp_path: Path, cpus_more: int, same_vendor: bool, margin: str, noise: str, followed: bool
) -> None:
    here = _shoal.tune_tables("")["vendor"]
    vendor = here if same_vendor else another_vendor(here)
    table = tmp_path / "t.txt"
    table.write_text(measured_row(len(os.sched_getaffinity(0)) + cpus_more, vendor, margin, noise))
    # the model's own choice, without any table
    model = launch(2, "tune_job.py", env={"SHOAL_TUNE_BUILTIN": "0"})
    assert "chosen=binomial" not in model.stdout, "the row must name another algorithm than the model's"
    job = launch(2, "tune_job.py", env={"SHOAL_TUNE_FILE": str(table), "SHOAL_TUNE_BUILTIN": "0"})
    # not followed: the cost model decides (calibrated at init, so its pick may differ between jobs)
    assert ("chosen=binomial" in job.stdout) == followed, job.stdout


def test_check_says_where_the_tables_lose() -> None:
    def at(algo: str, us: float, spread: float = 0.0) -> Measurement:
        return point(1 << 20, algo, us, samples=[us * (1 - spread / 2), us, us * (1 + spread / 2)])

    measured = [at("binomial", 480.0, 0.1), at("ring", 240.0, 0.1), at("rabenseifner", 250.0, 0.05)]
    key = ("allreduce", 1 << 20)
    [v] = verdicts(measured, {key: "binomial"}, {key: "ring"}, 2)
    assert v.loses and v.best.algo == "ring" and v.model.algo == "ring"
    # within the scatter of the two's repeats is not a loss, nor is picking what the model picks
    close = [at("binomial", 260.0, 0.1), at("ring", 240.0, 0.1)]
    assert not verdicts(close, {key: "binomial"}, {key: "ring"}, 2)[0].loses
    assert not verdicts(measured, {key: "ring"}, {key: "ring"}, 2)[0].loses
    assert isinstance(v, Verdict)


def test_shoal_tune_check_measures_the_tables_pick_against_the_model(tmp_path: Path) -> None:
    """End to end: the report names, per size, the pick of the table in
    force, the model's and the fastest, and the exit status follows the verdict."""
    table = tmp_path / "t.txt"
    table.write_text(measured_row(len(os.sched_getaffinity(0)), _shoal.tune_tables("")["vendor"], "90%", "5%"))
    cmd = [sys.executable, "-m", "shoal.cli", "tune", "--check", "-n", "2", "--collectives", "allreduce"]
    cmd += ["--sizes", "256K", "--repeats", "3", "--out", str(tmp_path / "check.txt"), "--no-progress"]
    # Alone: a built-in row of this machine class that saw the model's pick
    # beat binomial would keep the model's pick (docs/tuning.md, rule 4).
    env = {**os.environ, "SHOAL_TUNE_FILE": str(table), "SHOAL_TUNE_BUILTIN": "0"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("allreduce")]
    assert len(lines) == 1, proc.stdout + proc.stderr[-3000:]
    words = lines[0].split()
    assert words[:5] == ["allreduce", "2", "256", "KiB", "binomial"], lines[0]
    assert words[6] != "binomial", "the model's pick is measured beside the table's"
    loses = "LOSES to the model" in lines[0]
    assert proc.returncode == (1 if loses else 0), proc.stderr[-3000:]
