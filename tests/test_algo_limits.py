"""shoal.algo past its limits: plans that ask for absurd scratch, JSON documents
with numbers no executor can run, and verification of large counts end in a
ValueError or MemoryError naming the algorithm or the document's field, never
in an abort or a panic. Each case runs in a fresh interpreter, since an abort
would take pytest down with it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap

import pytest

REGISTERED = """
import numpy as np, shoal
from shoal import algo

@algo.register("allreduce", "greedy")
def greedy(b):
    {scratch}
    b.copy(algo.input(0, b.count), algo.output(0, b.count))

g = shoal.init()
try:
    g.allreduce(np.ones({count}, dtype=np.float32), algorithm="greedy")
except Exception as e:
    print(f"{{type(e).__name__}}: {{e}}")
"""

JSON_VERIFY = """
import json
from shoal import algo

doc = json.loads(algo.plan_json("allreduce", "ring", 2, {count}))
{edit}
try:
    print("verify:", algo.Plan.from_json(json.dumps(doc)).verify())
except Exception as e:
    print(f"{{type(e).__name__}}: {{e}}")
"""


def _run(code: str, memory: int | None = None) -> str:
    """The first line `code` prints in a fresh one-rank interpreter, whose
    address space is capped at `memory` bytes if given; fails on an abort or a
    panic."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SHOAL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    clean["MALLOC_ARENA_MAX"] = "2"  # per-thread arenas reserve address space, not memory

    def cap() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cap,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{out[-3000:]}"
    assert "panicked" not in out and "PanicException" not in out, out[-3000:]
    return proc.stdout.strip().splitlines()[0]


@pytest.mark.parametrize("scratch", ["2**40", "2**62"])
def test_a_registered_algorithm_asking_for_absurd_scratch_is_a_value_error(scratch: str) -> None:
    line = _run(REGISTERED.format(scratch=f"b.scratch({scratch})", count=4))
    assert line.startswith("VerifyError: greedy is wrong for allreduce(world=1, count=4"), line
    assert f"scratch of {eval(scratch)} elements" in line and "more than the limit" in line, line


def test_scratch_past_64_bits_is_refused_in_the_builder() -> None:
    line = _run(REGISTERED.format(scratch="b.scratch(2**64)", count=4))
    assert line == "ValueError: scratch: 18446744073709551616 elements do not fit in 64 bits", line


def test_scratch_asked_for_only_past_the_verified_size_is_refused_before_running() -> None:
    # Registered algorithms are verified at a capped count; the plan that runs
    # must still pass the scratch limit.
    line = _run(REGISTERED.format(scratch="b.scratch(2**40 if b.count > 65536 else 0)", count=70000))
    assert line.startswith("ValueError: allreduce algorithm 'greedy': rank 0: scratch of 1099511627776"), line


def test_scratch_within_the_limit_that_the_machine_lacks_is_a_memory_error() -> None:
    # 4 x the call's 256 MiB is within the limit, but not within 1.25 GiB of address space.
    code = REGISTERED.format(scratch="b.scratch(4 * b.count)", count=1 << 25).replace("np.float32", "np.float64")
    line = _run(code, memory=5 << 28)
    assert line.startswith("MemoryError: allreduce(algorithm=greedy, count=33554432, dtype=float64"), line
    assert "no memory for the plan's 134217728 elements of scratch" in line, line


def test_json_scratch_past_the_limit_names_the_field() -> None:
    line = _run(JSON_VERIFY.format(count=4, edit='doc["ranks"][0]["scratch"] = 4294967296'))
    assert line.startswith("ValueError: ranks[0].scratch: scratch of 4294967296 elements is more than the limit"), line


def test_json_count_past_what_any_call_can_hold_names_the_field() -> None:
    line = _run(JSON_VERIFY.format(count=4, edit='doc["shape"]["count"] = 18446744073709551615'))
    assert line.startswith("ValueError: shape.count: "), line


def test_verifying_a_large_json_plan_needs_no_memory_per_element() -> None:
    # 10M elements per rank took 2.7 GB when the verifier modelled every one.
    line = _run(JSON_VERIFY.format(count=10_000_000, edit=""), memory=1 << 30)
    assert line == "verify: None", line


def test_a_plan_too_fine_to_model_is_refused_by_name() -> None:
    # Shifting by one element cuts the buffers at every element: nothing to merge.
    code = """
    from shoal import algo

    def shifted(b):
        b.copy(algo.input(0, b.count - 1), algo.output(1, b.count - 1))

    try:
        algo.verify(shifted, "allgather", worlds=[1], counts=[1 << 21], chunks=[1 << 21])
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
    """
    line = _run(code, memory=1 << 30)
    assert line.startswith("VerifyError: shifted is wrong for allgather(world=1, count=2097152"), line
    assert "more segments than the verifier models" in line, line


def test_a_plan_of_too_many_steps_is_refused_by_name() -> None:
    # At chunk 1 the steps grow with the count, and the race check's memory
    # with their square (4.8 GB here).
    code = """
    from shoal import algo

    print(algo.plan("allreduce", "ring", 2, 1 << 16, chunk=1).verify()[0])
    """
    line = _run(code, memory=1 << 30)
    assert line.startswith("rank 0: 196608 steps are more than the verifier checks in one plan (32768)"), line


def test_a_plan_that_keeps_doubling_its_values_is_caught_in_little_memory() -> None:
    # Two buffers reduced into each other in turn, 80 times: 2^80 contributions.
    code = """
    import json
    from shoal import algo

    steps = [
        {"op": "copy", "src": ["input", 0, 1], "dst": ["output", 0, 1], "deps": []},
        {"op": "copy", "src": ["input", 0, 1], "dst": ["scratch", 0, 1], "deps": [0]},
    ]
    for _ in range(80):
        n = len(steps)
        steps.append({"op": "reduce", "src": ["output", 0, 1], "dst": ["scratch", 0, 1], "deps": [n - 1]})
        steps.append({"op": "reduce", "src": ["scratch", 0, 1], "dst": ["output", 0, 1], "deps": [n]})
    shape = {"collective": "allreduce", "world": 1, "count": 1, "chunk": 1}
    doc = {"format": "shoal-plan/1", "shape": shape, "ranks": [{"rank": 0, "scratch": 1, "steps": steps}]}
    print(algo.Plan.from_json(json.dumps(doc)).verify()[0])
    """
    line = _run(code, memory=1 << 30)
    assert line == "rank 0: Output[0]: contribution of rank 0 counted twice", line
