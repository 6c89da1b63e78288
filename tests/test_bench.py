"""`shoal bench`: size parsing, the reference checker, and tiny end-to-end runs
(2 ranks, small sizes) of shoal alone, against Gloo (when torch is installed)
and against OpenMPI (when mpi4py and mpirun are), checking that the JSON,
table and plots are written and that every result was correct."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shoal.bench import check
from shoal.bench.sizes import human, parse_sizes

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
HAS_MPI = shutil.which("mpirun") is not None and importlib.util.find_spec("mpi4py") is not None
TINY = ["--sizes", "8,4K,64K", "--iters", "5", "--warmup", "1", "--repeats", "2", "--no-progress"]


def test_sizes() -> None:
    assert parse_sizes("8:64M")[:3] == [8, 16, 32] and parse_sizes("8:64M")[-1] == 64 << 20
    assert len(parse_sizes("8:64M")) == 24
    assert parse_sizes("1K,4K,1K") == [1024, 4096]
    assert parse_sizes("64KiB:1MB:4") == [64 << 10, 256 << 10, 1 << 20]
    assert parse_sizes("1K:4K:+1K") == [1024, 2048, 3072, 4096]
    assert human(65536) == "64 KiB" and human(12) == "12 B"
    for bad in ("", "8:4", "x", "8:64M:1", "0"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def _simulate(lay: check.Layout, op: str, root: int) -> list[np.ndarray]:
    """What a correct library leaves in each rank's result buffer, computed independently."""
    n, b = lay.nranks, lay.block
    ins = []
    for r in range(n):
        inp, out = check.allocate(lay)
        check.fill_for_check(lay, r, op, root, inp, out)
        ins.append(check.from_storage(inp, lay.dtype))
    red = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}[op]
    if lay.collective in ("allreduce", "reduce"):
        return [check.to_storage(red(np.stack(ins), axis=0), lay.dtype)] * n
    if lay.collective == "broadcast":
        return [check.to_storage(ins[root], lay.dtype)] * n
    if lay.collective == "allgather":
        return [check.to_storage(np.concatenate(ins), lay.dtype)] * n
    if lay.collective == "reduce_scatter":
        total = red(np.stack(ins), axis=0)
        return [check.to_storage(total[r * b : (r + 1) * b], lay.dtype) for r in range(n)]
    blocks = [np.concatenate([ins[q][r * b : (r + 1) * b] for q in range(n)]) for r in range(n)]
    return [check.to_storage(x, lay.dtype) for x in blocks]


@pytest.mark.parametrize("collective", check.BUS_FACTOR)
@pytest.mark.parametrize("dtype", ["float32", "int8", "float16", "bfloat16", "uint8"])
def test_reference_checker(collective: str, dtype: str) -> None:
    ops = ["sum", "max", "prod"] if collective in check.REDUCING else ["sum"]
    for op in ops:
        for n, nbytes in ((1, 8), (3, 100), (4, 4096)):
            lay = check.layout(collective, nbytes, dtype, n)
            for r, got in enumerate(_simulate(lay, op, root=0)):
                inp, out = check.allocate(lay)
                target = inp if out is None else out
                target[:] = got
                assert check.count_errors(lay, r, op, 0, inp, out) == 0, (collective, dtype, op, n, r)
                if collective == "reduce" and r != 0:
                    continue
                target[0] = 0  # the sentinel: never a correct value
                assert check.count_errors(lay, r, op, 0, inp, out) == 1


def test_layout_follows_nccl_tests() -> None:
    lay = check.layout("allgather", 1 << 20, "float32", 4)
    assert (lay.nbytes, lay.in_count, lay.out_count) == (1 << 20, 1 << 16, 1 << 18)
    lay = check.layout("reduce_scatter", 100, "float32", 3)  # 25 elements -> 24, 8 per rank
    assert (lay.count, lay.in_count, lay.out_count) == (24, 24, 8)
    assert check.layout("alltoall", 8, "float32", 4).count == 4  # at least one element per rank
    assert check.BUS_FACTOR["allreduce"](4) == 1.5


def bench(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, dict, str]:
    out = tmp_path / "results"
    cmd = [sys.executable, "-m", "shoal.cli", "bench", *args, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    doc = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


def assert_good(doc: dict, out: Path, libraries: list[str], sizes: list[int]) -> None:
    assert [s["library"] for s in doc["series"]][: len(libraries)] == libraries
    for s in doc["series"]:
        assert s["status"] == "ok", s
        assert [r["size"] for r in s["results"]] == sizes, s["name"]
        for r in s["results"]:
            assert r["errors"] == 0, (s["name"], r)
            assert r["time_us"] > 0 and r["algbw_gbps"] > 0 and len(r["samples_us"]) == 2
    roof = doc["roofline"]
    if roof is not None:  # measured unless --no-roofline
        assert roof["per_process_gbps"] > 0 and roof["aggregate_gbps"] > 0
    assert (out / "table.txt").read_text().count("busbw(GB/s)") == len(doc["series"])
    if HAS_MPL:
        png = out / "algbw.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if len(set(libraries)) > 1:
            assert (out / "speedup.png").exists()


def test_bench_shoal_only(tmp_path: Path) -> None:
    code, doc, output = bench(tmp_path, "allreduce", "-n", "2", *TINY)
    assert code == 0, output
    assert doc["roofline"]["concurrent"]["processes"] == 2
    assert_good(doc, tmp_path / "results", ["shoal"], [8, 4096, 65536])
    assert doc["series"][0]["results"][0]["algo"]  # the algorithm the selector picked
    assert "speedup" not in output


def test_bench_every_algorithm_of_a_blocked_collective(tmp_path: Path) -> None:
    import shoal

    code, doc, output = bench(tmp_path, "reduce_scatter", "-n", "3", "--algo", "all", "--no-roofline", *TINY)
    assert code == 0, output
    names = [s["name"] for s in doc["series"]]
    assert names == ["shoal"] + [f"shoal:{a}" for a in shoal.algorithms("reduce_scatter")]
    # 3 ranks: counts round down to a multiple of 3 elements (8 B -> 3 floats)
    assert_good(doc, tmp_path / "results", ["shoal"] * len(names), [12, 4092, 65532])
    assert doc["algorithms"]["rows"][0]["fastest"] in names


def test_bench_against_gloo(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    code, doc, output = bench(tmp_path, "allreduce", "-n", "2", "--against", "gloo", "--no-roofline", *TINY)
    assert code == 0, output
    assert_good(doc, tmp_path / "results", ["shoal", "gloo"], [8, 4096, 65536])
    rows = doc["ratios"]["others"]["gloo"]["rows"]
    assert [r["size"] for r in rows] == [8, 4096, 65536] and all(r["ratio"] > 0 for r in rows)
    assert "gloo/shoal" in output and "> 1 means shoal is faster" in output


@pytest.mark.skipif(not HAS_MPI, reason="needs mpirun and mpi4py (bash scripts/bench-deps.sh mpi)")
def test_bench_against_mpi(tmp_path: Path) -> None:
    code, doc, output = bench(tmp_path, "alltoall", "-n", "2", "--against", "mpi", "--no-roofline", *TINY)
    assert code == 0, output
    assert_good(doc, tmp_path / "results", ["shoal", "mpi"], [8, 4096, 65536])
    assert "mpi/shoal" in output


def _turns(doc: dict) -> list[tuple[float, float, str, int]]:
    """Every job's timed repeats: (start, end, job, size), in the order they ran."""
    return sorted((a, b, s["name"], r["size"]) for s in doc["series"] for r in s["results"] for a, b in r["ran_unix"])


@pytest.mark.parametrize("interleave", ["repeat", "job"])
def test_jobs_take_turns_repeat_by_repeat(tmp_path: Path, interleave: str) -> None:
    args = ["--algo", "ring,binomial", "--interleave", interleave, "--no-roofline", *TINY]
    code, doc, output = bench(tmp_path, "allreduce", "-n", "2", *args)
    assert code == 0, output
    assert doc["settings"]["interleave"] == interleave
    assert_good(doc, tmp_path / "results", ["shoal", "shoal"], [8, 4096, 65536])
    turns = _turns(doc)
    assert len(turns) == 2 * 3 * 2  # jobs x sizes x repeats
    # one job at a time, never two at once
    assert all(a[1] <= b[0] for a, b in zip(turns, turns[1:])), turns
    ran = [(job, size) for _, _, job, size in turns]
    if interleave == "repeat":
        # each job's first repeat of a size, then each one's second (in the
        # other order), then the next size
        ring, binomial = "shoal:ring", "shoal:binomial"
        assert [size for _, size in ran] == [8] * 4 + [4096] * 4 + [65536] * 4, ran
        assert [job for job, _ in ran[:4]] == [ring, binomial, binomial, ring], ran
    else:
        # a job runs all its sizes, then the next job
        assert [job for job, _ in ran[:6]] == ["shoal:ring"] * 6, ran


@pytest.mark.skipif(not HAS_MPI, reason="needs mpirun and mpi4py (bash scripts/bench-deps.sh mpi)")
def test_a_job_that_stops_early_ends_its_turns(tmp_path: Path) -> None:
    # MPI has no bfloat16: its job stops at the first size; shoal's jobs run
    # on, and nothing waits for the stopped one
    args = ["--algo", "ring,auto", "--against", "mpi", "--dtype", "bfloat16", "--no-roofline", *TINY]
    code, doc, output = bench(tmp_path, "allreduce", "-n", "2", *args)
    assert code == 0, output
    mpi = next(s for s in doc["series"] if s["library"] == "mpi")
    assert mpi["status"] == "unsupported" and "bfloat16" in mpi["unsupported"]
    assert all(len(s["results"]) == 3 for s in doc["series"] if s["library"] == "shoal")


def test_a_job_that_fails_ends_its_turns(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # shoal's ranks cannot start (a bad setting): Gloo's job still runs every size
    env = {"SHOAL_TIMEOUT": "soon"}
    code, doc, output = bench(tmp_path, "allreduce", "-n", "2", "--against", "gloo", "--no-roofline", *TINY, env=env)
    assert code == 1, output
    by = {s["library"]: s for s in doc["series"]}
    assert by["shoal"]["status"] == "failed" and by["gloo"]["status"] == "ok", output
    assert [r["size"] for r in by["gloo"]["results"]] == [8, 4096, 65536]


def test_missing_competitor_names_the_install_command(tmp_path: Path) -> None:
    # no mpirun on PATH: nothing runs, and the message says what provides it
    code, doc, output = bench(tmp_path, "allreduce", "--against", "mpi", *TINY, env={"PATH": str(tmp_path)})
    assert code == 2 and not doc
    assert "apt-get install -y openmpi-bin" in output and "scripts/bench-deps.sh" in output


@pytest.mark.parametrize("where", ["/proc/nope", "file"])
def test_unwritable_out_is_a_one_line_error(tmp_path: Path, where: str) -> None:
    """Checked before anything runs: one line naming the folder, exit code 2, no traceback."""
    out = "/proc/nope" if where == "/proc/nope" else str(tmp_path / "a-file")
    if where == "file":
        Path(out).write_text("not a folder")
    cmd = [sys.executable, "-m", "shoal.cli", "bench", "allreduce", "-n", "2", *TINY, "--out", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shoal bench: ") and out in lines[0], proc.stderr


def test_bench_ina_beside_ring_with_a_switch(tmp_path: Path) -> None:
    """In-network against ring allreduce in one invocation (what benches/ina_vs_ring.py timed)."""
    from test_ina import switch

    with switch() as (addr, _metrics):
        code, doc, output = bench(
            tmp_path, "allreduce", "-n", "2", "--algo", "ring,ina", "--no-roofline", *TINY, env={"SHOAL_SWITCH": addr}
        )
    assert code == 0, output
    assert [s["name"] for s in doc["series"]] == ["shoal:ring", "shoal:ina"]
    assert_good(doc, tmp_path / "results", ["shoal", "shoal"], [8, 4096, 65536])
    assert {r["algo"] for r in doc["series"][1]["results"]} == {"ina"}


def test_the_node_benchmark_script_runs_every_step(tmp_path: Path) -> None:
    """scripts/node-bench.sh runs only on the lent 16-core machine, whose minutes
    are few: here, small, each of its steps must run and leave its results."""
    out, results = tmp_path / "out", tmp_path / "results"
    env = {
        **os.environ,
        "OUT": str(out),
        "RESULTS": str(results),
        "RANKS": "2",
        "SIZES": "8,64K",
        "ROUNDS": "1",
        "AGAINST": "",
        "ALGOS_AGAINST": "",
        "TUNE_SIZES": "8,64K",
        "TUNE_REPEATS": "2",
        "PYTHON": sys.executable,
    }
    script = Path(__file__).parent.parent / "scripts" / "node-bench.sh"
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    summary = (out / "summary.log").read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for step in ("info", "broadcast", "allreduce", "algos", "allgather", "reduce_scatter", "tune"):
        assert f"== {step}: exit 0" in summary, summary
    # `tune --check` exits 1 when a table loses to the cost model: a finding of the run (with
    # two repeats, noise alone can give it where rows for this machine class apply), not a crash
    assert re.search(r"== check: exit [01] ", summary), summary
    verdict = r"shoal tune --check: the tables (lose nowhere|lose to the cost model)"
    assert re.search(verdict, (out / "check.log").read_text())
    assert "2 ranks: calibrated against rank 1" in (out / "info.log").read_text()
    for folder in ("broadcast-2", "allreduce-2", "broadcast-2-algos", "allreduce-2-algos", "allgather-2"):
        doc = json.loads((results / folder / "results.json").read_text())
        assert all(not r["errors"] for s in doc["series"] for r in s["results"]), folder
    algos = json.loads((results / "allreduce-2-algos" / "results.json").read_text())
    assert {s["name"] for s in algos["series"]} >= {"shoal", "shoal:shm_flat", "shoal:rabenseifner"}
    assert (results / "tune-2.txt").read_text().count("world=2") == 2
    assert (out / "bench.tgz").stat().st_size > 0


def test_paired_ratios_compare_repeats_that_ran_together() -> None:
    from shoal.bench import report

    # the machine slowed 10x for shoal's 2nd and 3rd repeats and the other's
    # 3rd and 4th (they ran in the same turns): medians alone would make the
    # other look 2.5x slower; every pair says 2x
    shoal = [1.0, 10.0, 10.0, 1.0, 1.0]
    other = [2.0, 20.0, 20.0, 2.0, 2.0]
    assert report.paired_ratio(other, shoal) == 2.0
    assert report.paired_ratio(other[:4], shoal) is None  # a repeat without its pair
    series = [
        {
            "name": "shoal",
            "library": "shoal",
            "algo": None,
            "results": [{"size": 8, "time_us": 2.0, "samples_us": shoal}],
        },
        {
            "name": "shoal:ring",
            "library": "shoal",
            "algo": "ring",
            "results": [{"size": 8, "time_us": 1.0, "samples_us": [0.5] * 5}],
        },
        {"name": "mpi", "library": "mpi", "algo": None, "results": [{"size": 8, "time_us": 3.0, "samples_us": other}]},
    ]
    row = report.ratios(series, paired=True)["others"]["mpi"]["rows"][0]
    assert row["ratio"] == 1.5 and row["paired_ratio"] == 2.0
    assert "paired_ratio" not in report.ratios(series)["others"]["mpi"]["rows"][0]
    at = report.algorithm_table(series, paired=True)
    assert at is not None and at["automatic"] == "shoal"
    assert at["rows"][0]["fastest_forced"] == "shoal:ring" and at["rows"][0]["auto_over_fastest"] == 2.0
    assert at["rows"][0]["auto_over_fastest_paired"] == 2.0
