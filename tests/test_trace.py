"""SHOAL_TRACE: every rank's trace has one event per executed plan step,
`shoal trace merge` puts the ranks on one timeline; and the flight recorder
names the pending call when a call fails."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import init_with, launch, spawn_ranks

from shoal import cli
from shoal.trace import load_rank

Event = dict[str, Any]
#: Rounding to the nanosecond (3 decimals of a microsecond) on both ends.
EPS_US = 0.002


def run_traced(
    tmp_path: Path, n: int, transport: str, extra_env: dict[str, str] | None = None
) -> tuple[list[Event], list[list[dict[str, Any]]]]:
    """Runs tests/workers/trace_job.py traced; returns the merged events and each rank's expectations."""
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    env = {"SHOAL_TRACE": str(trace_dir), "SHOAL_TRANSPORT": transport, **(extra_env or {})}
    launch(n, "trace_job.py", str(trace_dir), env=env, timeout=120)
    out = tmp_path / "job.json"
    assert cli.main(["trace", "merge", str(trace_dir), "-o", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    expected = [json.loads((trace_dir / f"expected-{r}.json").read_text()) for r in range(n)]
    return events, expected


def check_well_formed(events: list[Event], n: int) -> None:
    for e in events:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and 0 <= e["pid"] < n, e
        assert isinstance(e["tid"], int) and e["tid"] >= 0, e
        if e["ph"] != "X":
            continue
        assert isinstance(e["name"], str) and e["cat"] in ("call", "step"), e
        assert e["dur"] >= 0 and isinstance(e["ts"], (int, float)), e
        args = e["args"]
        assert args["blocked_us"] >= 0 and args["blocked_us"] <= e["dur"] + EPS_US, e
        if e["cat"] == "step":
            assert e["tid"] > 0 and e["name"] == args["kind"], e
            kinds = ("send", "recv", "recv_reduce", "copy", "reduce")
            shared = ("expose", "peer_read", "peer_read_reduce", "release")
            assert args["kind"] in kinds + shared, e
            assert args["bytes"] >= 0, e
            if args["kind"] in ("send", "recv", "recv_reduce", "peer_read", "peer_read_reduce"):
                assert args["peer"] != e["pid"] and 0 <= args["peer"] < n, e
        else:
            assert e["tid"] == 0 and args["status"] == "ok", e


def check_lanes_ordered(events: list[Event]) -> None:
    """Events on one lane (Chrome thread) follow each other without overlapping."""
    lanes: dict[tuple[int, int], list[Event]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            lanes[(e["pid"], e["tid"])].append(e)
    for lane, evs in lanes.items():
        evs.sort(key=lambda e: e["ts"])
        for a, b in zip(evs, evs[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + EPS_US, (lane, a, b)


def check_one_event_per_step(events: list[Event], expected: list[list[dict[str, Any]]]) -> None:
    """Each rank's calls are the ones it made, in order, and each has one
    event for every step of its plan, within the call."""
    for rank, want in enumerate(expected):
        calls = sorted((e for e in events if e.get("cat") == "call" and e["pid"] == rank), key=lambda e: e["ts"])
        got = [{"collective": c["name"], **{k: c["args"][k] for k in ("algorithm", "steps")}} for c in calls]
        assert got == want, rank
        for c in calls:
            seq = c["args"]["seq"]
            steps = [e for e in events if e.get("cat") == "step" and e["pid"] == rank and e["args"]["seq"] == seq]
            assert sorted(s["args"]["step"] for s in steps) == list(range(c["args"]["steps"])), (rank, c)
            for s in steps:
                assert s["args"]["collective"] == c["name"] and s["args"]["algorithm"] == c["args"]["algorithm"]
                assert c["ts"] - EPS_US <= s["ts"] and s["ts"] + s["dur"] <= c["ts"] + c["dur"] + EPS_US, (c, s)


def check_clocks_aligned(events: list[Event], n: int) -> None:
    """On the merged timeline no message arrives before it was sent: per
    call and ordered pair of ranks, the first receive ends after the first
    send began, within the clock measurement's uncertainty."""
    rtt_us = {e["pid"]: e["args"]["rtt_ns"] / 1000 for e in events if e.get("name") == "shoal_clock"}
    assert sorted(rtt_us) == list(range(n))
    first_send: dict[tuple[int, int, int], float] = {}
    first_arrival: dict[tuple[int, int, int], float] = {}
    for e in events:
        if e.get("cat") != "step" or e["args"].get("kind") not in ("send", "recv", "recv_reduce"):
            continue  # messages only: shared-memory reads pair with an Expose, not a send
        a = e["args"]
        if a["kind"] == "send":
            key = (a["seq"], e["pid"], a["peer"])
            first_send[key] = min(first_send.get(key, e["ts"]), e["ts"])
        else:
            key = (a["seq"], a["peer"], e["pid"])
            end = e["ts"] + e["dur"]
            first_arrival[key] = min(first_arrival.get(key, end), end)
    assert first_arrival and first_arrival.keys() == first_send.keys()
    for (seq, src, dst), arrived in first_arrival.items():
        slack = (rtt_us[src] + rtt_us[dst]) / 2 + 5
        assert arrived >= first_send[(seq, src, dst)] - slack, (seq, src, dst)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_trace_has_one_event_per_executed_step(tmp_path: Path, n: int, transport: str) -> None:
    events, expected = run_traced(tmp_path, n, transport)
    check_well_formed(events, n)
    check_lanes_ordered(events)
    check_one_event_per_step(events, expected)
    check_clocks_aligned(events, n)


def test_a_python_algorithm_is_traced_step_by_step(tmp_path: Path) -> None:
    """The README's path: an algorithm written in Python (examples/algorithms),
    run on real processes, has one event per step of its plan, under its name."""
    ring = Path(__file__).parent.parent / "examples" / "algorithms" / "ring_allreduce.py"
    events, expected = run_traced(tmp_path, 3, "shm", {"SHOAL_ALGORITHMS": str(ring)})
    check_well_formed(events, 3)
    check_one_event_per_step(events, expected)
    assert any(e.get("cat") == "step" and e["args"]["algorithm"] == "py_ring" for e in events)


def test_merge_reads_a_trace_cut_short(tmp_path: Path) -> None:
    """A rank killed while writing leaves a torn last line: the rest is read."""
    lines = [
        '[{"name":"shoal_clock","ph":"M","pid":0,"tid":0,"args":{"offset_ns":1500,"rtt_ns":10}}',
        ',\n{"name":"copy","cat":"step","ph":"X","ts":1.000,"dur":2.000,"pid":0,"tid":1,"args":{}}',
        ',\n{"name":"send","cat":"st',
    ]
    path = tmp_path / "rank-0.json"
    path.write_text("".join(lines))
    assert [e["name"] for e in load_rank(path)] == ["shoal_clock", "copy"]
    out = tmp_path / "job.json"
    assert cli.main(["trace", "merge", str(tmp_path), "-o", str(out)]) == 0
    merged = json.loads(out.read_text())["traceEvents"]
    assert [e["ts"] for e in merged if e["ph"] == "X"] == [2.5]  # 1 us + the 1.5 us offset


def test_merge_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["trace", "merge", str(tmp_path)]) == 1
    assert "no rank-<r>.json files" in capsys.readouterr().err
    (tmp_path / "rank-0.json").write_text("[]")
    assert cli.main(["trace", "merge", str(tmp_path)]) == 1
    assert "not a shoal trace" in capsys.readouterr().err
    assert cli.main(["trace", "merge", str(tmp_path / "nowhere")]) == 1
    assert "not a directory" in capsys.readouterr().err


def merge_in_subprocess(directory: Path) -> subprocess.CompletedProcess[str]:
    """`shoal trace merge DIR` as a user runs it, killed after 30 s so a merge that blocks fails the test."""
    cmd = [sys.executable, "-m", "shoal.cli", "trace", "merge", str(directory)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def clock_event(args: dict[str, Any]) -> str:
    return json.dumps([{"name": "shoal_clock", "ph": "M", "pid": 0, "tid": 0, "args": args}])


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\xff\xfe" + random.Random(1).randbytes(4096), "not a shoal trace (not UTF-8 text"),
        (b'{"traceEvents": 3}', "not a shoal trace (expected a JSON array of trace events)"),
        (b"[1, 2, 3]", "not a shoal trace (expected a JSON array of trace events)"),
        (clock_event({"rtt_ns": 10}).encode(), "its shoal_clock event has no numeric args.offset_ns"),
        (clock_event({"offset_ns": "soon"}).encode(), "its shoal_clock event has no numeric args.offset_ns"),
        (
            clock_event({"offset_ns": 0})[:-1].encode() + b', {"name": "copy", "ph": "X", "ts": "late"}]',
            "event 1 has a ts that is not a number",
        ),
    ],
    ids=["random-bytes", "object", "numbers", "no-offset", "text-offset", "text-ts"],
)
def test_merge_names_the_file_and_the_problem(tmp_path: Path, content: bytes, problem: str) -> None:
    rank = tmp_path / "rank-0.json"
    rank.write_bytes(content)
    proc = merge_in_subprocess(tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert proc.stderr.startswith(f"shoal trace merge: {rank}: {problem}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_merge_refuses_a_fifo_without_opening_it(tmp_path: Path) -> None:
    """Opening a FIFO waits for a writer: merge must refuse it from its type, not block."""
    os.mkfifo(tmp_path / "rank-0.json")
    proc = merge_in_subprocess(tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"shoal trace merge: {tmp_path / 'rank-0.json'}: it is a FIFO, not a regular file"


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("SHOAL_FLIGHT_RECORDER", "lots", "whole number, 0 to 65536"),
        ("SHOAL_FLIGHT_RECORDER", "100000", "at most 65536"),
        ("SHOAL_TRACE", "/proc/no-such-dir", "cannot create the directory"),
    ],
)
def test_bad_settings_fail_init_naming_the_variable(name: str, value: str, hint: str) -> None:
    proc = init_with({name: value})
    assert proc.returncode != 0 and "initialised" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert name in last and value in last and hint in last, last


def test_a_single_rank_traces_too(tmp_path: Path) -> None:
    proc = init_with({"SHOAL_TRACE": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    events = load_rank(tmp_path / "rank-0.json")
    clock = [e for e in events if e["name"] == "shoal_clock"]
    assert clock[0]["args"]["offset_ns"] == 0 and clock[0]["args"]["world"] == 1


def raised(res: Any) -> str:
    m = re.search(r"RAISED after [\d.]+s: \w+: (.*)", res.stdout, re.S)
    assert m, f"did not raise:\n{res.stdout}\n{res.stderr[-3000:]}"
    return m[1]


def test_flight_recorder_names_the_call_a_stopped_rank_left_pending() -> None:
    """Rank 1 stops inside a ring allreduce: the others' timeout errors end
    with their last calls, the failed one with the steps it waited on."""
    victim = 1
    env = {"SHOAL_TRANSPORT": "shm", "SHOAL_TIMEOUT": "2"}
    results = spawn_ranks(3, "stall.py", str(victim), "7", env=env, timeout=60)
    for r in (0, 2):
        msg = raised(results[r])
        tail = msg.split(f"last calls of rank {r} (flight recorder", 1)
        assert len(tail) == 2, msg
        calls = tail[1].splitlines()[1:]
        assert 1 <= len(calls) <= 4, msg
        assert all("allreduce(count=1048576, dtype=float32, op=sum, algorithm=ring)" in c for c in calls), msg
        assert "finished, " in calls[0], msg
        last = calls[-1]
        assert re.search(r"FAILED after (under )?[\d.]+ ms, \d+ of \d+ steps done, pending: step \d+ \(\w+", last), msg
        # The log has the whole ring (SHOAL_LOG defaults to warn, so errors show).
        assert re.search(rf"rank {r} failed \((Timeout|Aborted)\); its last calls \(flight recorder", results[r].stderr)


def test_flight_recorder_dump_on_peer_death_and_off_with_zero() -> None:
    victim = 1
    off = {"SHOAL_FLIGHT_RECORDER": "0"}
    results = spawn_ranks(
        3, "die.py", str(victim), env={"SHOAL_TIMEOUT": "60"}, rank_env=lambda r: off if r == 2 else {}
    )
    msg = raised(results[0])
    assert "last calls of rank 0 (flight recorder" in msg, msg
    assert re.search(r"allreduce\(count=1048576, dtype=float32, op=sum, algorithm=\w+\): FAILED", msg), msg
    assert "flight recorder" not in raised(results[2])


def test_tracing_on_some_ranks_only_is_a_clear_error(tmp_path: Path) -> None:
    """The clock measurement is collective: a rank without SHOAL_TRACE used to
    leave the job waiting until SHOAL_TIMEOUT and then report a deadlock."""
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    results = spawn_ranks(
        2,
        "store_job.py",
        env={"SHOAL_TIMEOUT": "20"},
        rank_env=lambda r: {"SHOAL_TRACE": str(trace_dir)} if r == 0 else {},
        timeout=60,
    )
    for res in results:
        assert res.returncode == 3, (res.stdout, res.stderr)
        assert "SHOAL_TRACE is set on ranks [0] but not on ranks [1]" in res.stdout, res.stdout
        assert "deadlock" not in res.stdout + res.stderr
