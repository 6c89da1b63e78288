"""`shoal sim plan` runs any algorithm the executor can run: built-in, registered
from Python (in this process or through SHOAL_ALGORITHMS), or a plan document."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import builtin_ring_in_python, launch

from shoal import algo, cli, sim

ALGORITHMS = Path(__file__).parent / "algorithms"
sys.path.insert(0, str(ALGORITHMS))
EXAMPLES = Path(__file__).parent.parent / "examples" / "algorithms"
ENGINES = ("flow", "packet")


@pytest.fixture(scope="module", autouse=True)
def _register_sim_py_ring() -> None:
    """Registered when this file's tests run, not when pytest imports it: a
    registration lasts for the process, and other files (test_cli, test_tune)
    compare this process's algorithm lists with a fresh process's."""
    algo.register("allreduce", "sim_py_ring")(builtin_ring_in_python)


CALL = {"ranks": 16, "size": "4MiB", "topology": "fattree:k=4"}


def test_the_python_ring_lowers_to_the_builtin_plans() -> None:
    count = (4 << 20) // 4
    assert (
        algo.plan("allreduce", "sim_py_ring", 16, count).to_json().split("\n", 2)[2]
        == algo.plan("allreduce", "ring", 16, count).to_json().split("\n", 2)[2]
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_python_ring_simulates_to_the_builtin_ring_time(engine: str) -> None:
    builtin = sim.plan("allreduce", algo="ring", engine=engine, **CALL)
    python = sim.plan("allreduce", algo="sim_py_ring", engine=engine, **CALL)
    assert python["algo"] == "sim_py_ring"
    for key in ("time_s", "events", "messages", "network_bytes"):
        assert python[key] == builtin[key], key


@pytest.mark.parametrize("engine", ENGINES)
def test_a_plan_document_round_trips_to_the_same_time(
    engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "ring.json"
    doc.write_text(algo.plan_json("allreduce", "ring", 16, (4 << 20) // 4))
    builtin = sim.plan("allreduce", algo="ring", engine=engine, **CALL)
    argv = ["sim", "plan", "--plan", str(doc), "--topology", "fattree:k=4", "--engine", engine, "--json"]
    assert cli.main(argv) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert (from_file["collective"], from_file["algo"], from_file["ranks"]) == ("allreduce", "ring", 16)
    assert from_file["bytes"] == 4 << 20
    assert from_file["time_s"] == builtin["time_s"]
    assert from_file["events"] == builtin["events"]


def test_the_command_simulates_an_algorithm_loaded_through_shoal_algorithms() -> None:
    env = {**os.environ, "SHOAL_ALGORITHMS": str(EXAMPLES / "ring_allreduce.py")}
    argv = "sim plan allreduce --algo py_ring --ranks 8 --size 1MiB --topology star:hosts=8 --engine flow --json"
    out = subprocess.run(
        [sys.executable, "-m", "shoal.cli", *argv.split()], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    python = json.loads(out.stdout)
    builtin = sim.plan("allreduce", algo="ring", ranks=8, size="1MiB", topology="star:hosts=8", engine="flow")
    assert (python["algo"], python["time_s"]) == ("py_ring", builtin["time_s"])


def test_a_plan_document_refuses_the_arguments_it_would_replace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A document fixes its call: --ranks or --size beside it used to be dropped
    silently, and the printed line showed the size asked for, not the one simulated."""
    doc = tmp_path / "ring4.json"
    doc.write_text(algo.plan_json("allreduce", "ring", 4, 1000))
    argv = ["sim", "plan", "--plan", str(doc), "--topology", "fattree:k=4", "--engine", "flow"]
    assert cli.main([*argv, "--ranks", "8", "--size", "1MiB"]) == 2
    assert "leave out ranks, size" in capsys.readouterr().err
    assert cli.main(["sim", "plan", "broadcast", *argv[2:]]) == 2
    assert "the plan document is for allreduce, not broadcast" in capsys.readouterr().err
    with pytest.raises(ValueError, match="leave out algo"):
        sim.plan(document=doc, algo="ring", topology="fattree:k=4")
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("allreduce ring x4 4000B on fattree:k=4 (flow engine)"), printed


def test_a_broken_python_algorithm_is_named_not_simulated() -> None:
    @algo.register("allreduce", "sim_broken")
    def sim_broken(b: algo.Builder) -> None:
        b.copy(algo.input(0, b.count), algo.output(0, b.count))
        b.send((b.rank + 1) % b.world, 0, algo.output(0, b.count))  # never received

    with pytest.raises(ValueError, match="sim_broken"):
        sim.plan("allreduce", algo="sim_broken", engine="flow", **CALL)


@pytest.mark.timeout(900)  # 150 s on the loaded 2-vCPU VM: Python plans for 1024 ranks, two engines
def test_a_new_python_allreduce_is_verified_run_traced_and_simulated_at_1024_ranks(tmp_path: Path) -> None:
    """The bar of issue 28: one definition, written only in Python (not an example)."""
    import bidir_ring  # registers allreduce/bidir_ring

    assert algo.verify(bidir_ring.bidir_ring) == 70
    trace = tmp_path / "trace"
    trace.mkdir()
    env = {"SHOAL_ALGORITHMS": str(ALGORITHMS / "bidir_ring.py"), "SHOAL_TRACE": str(trace)}
    out = launch(4, "bidir_ring_job.py", env=env, timeout=180)
    assert out.stdout.count(": ok") == 4
    merged = tmp_path / "job.json"
    assert cli.main(["trace", "merge", str(trace), "-o", str(merged)]) == 0
    events = json.loads(merged.read_text())["traceEvents"]
    assert any(e.get("cat") == "step" and e["args"]["algorithm"] == "bidir_ring" for e in events)
    # Each NIC sends and receives as many bytes as in the ring, half to each
    # neighbour: on one switch (full-duplex links) the ring's time, to 1%.
    small = {"ranks": 8, "size": "8MiB", "topology": "star:hosts=8", "engine": "flow"}
    bidir, ring = (sim.plan("allreduce", algo=a, **small) for a in ("bidir_ring", "ring"))
    assert bidir["network_bytes"] == ring["network_bytes"]
    assert bidir["messages"] == 2 * ring["messages"]
    assert abs(bidir["time_s"] / ring["time_s"] - 1) < 0.01
    # 1024 ranks on both engines; the function runs once per rank for both (the DAG is kept).
    big = {"ranks": 1024, "size": "1MiB", "topology": "fattree:k=16"}
    started = time.process_time()
    flow = sim.plan("allreduce", algo="bidir_ring", engine="flow", **big)
    first = time.process_time() - started
    packet = sim.plan("allreduce", algo="bidir_ring", engine="packet", **big)
    assert flow["messages"] == packet["messages"] == 1024 * 4 * 1023
    assert 0 < flow["time_s"] and 0 < packet["time_s"]
    print(f"bidir_ring at 1024 ranks: {first:.1f} CPU s for plans, DAG and flow engine")


def test_tier_rates_slow_a_ring_that_crosses_the_core(capsys: pytest.CaptureFixture[str]) -> None:
    base = "sim plan allreduce --algo ring --ranks 16 --size 4MiB --topology fattree:k=4 --engine flow --json"
    assert cli.main(base.split()) == 0
    even = json.loads(capsys.readouterr().out)
    # The ring's neighbours 3->4, 7->8, ... cross the aggregation tier: at 1 Gb/s it bounds the ring.
    assert cli.main([*base.split(), "--tier-rates", "10gbit,1gbit"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert 8 < slow["time_s"] / even["time_s"] < 10.5
