"""shoal.algo: algorithms written in Python, verified, as JSON, registered and run on real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import launch

from shoal import algo

EXAMPLES = Path(__file__).parent.parent / "examples" / "algorithms"
sys.path.insert(0, str(EXAMPLES))


def ring(b: algo.Builder, *, skip_recv_on: int | None = None, twice_on: int | None = None) -> None:
    """A ring allreduce, optionally broken on one rank."""
    r, p = b.rank, b.world
    data = algo.output(0, b.count)
    b.copy(algo.input(0, b.count), data)
    blocks = data.split(p)
    for s in range(p - 1):
        b.send((r + 1) % p, s, blocks[(r - s - 1) % p])
        if not (r == skip_recv_on and s == 1):
            b.recv_reduce((r - 1) % p, s, blocks[(r - s - 2) % p])
    for s in range(p - 1):
        b.send((r + 1) % p, p + s, blocks[(r - s) % p])
        gather = b.recv_reduce if r == twice_on else b.recv  # adds the sum to a partial sum
        gather((r - 1) % p, p + s, blocks[(r - s - 1) % p])


def test_a_correct_ring_verifies_for_every_shape() -> None:
    assert algo.verify(ring, "allreduce") == 7 * 5 * 2
    assert algo.verify(ring, "allreduce", worlds=[16], counts=[1000], chunks=[7]) == 1


def test_a_missing_recv_names_the_unmatched_send_and_its_line() -> None:
    def broken(b: algo.Builder) -> None:
        ring(b, skip_recv_on=2)

    with pytest.raises(algo.VerifyError) as e:
        algo.verify(broken, "allreduce", worlds=[3], counts=[6], chunks=[64])
    err = e.value
    # Rank 1 sends its round-1 block to rank 2, which never receives it:
    # steps copy, send, recv_reduce, send.
    assert (err.rank, err.step) == (1, 3)
    assert "rank 1 step 3 (Send to 2 tag 1 Output[4..6]): no matching message on rank 2 (tag 1)" in str(err)
    assert "is send(2, 1, output[4:6]) at " in str(err)
    assert err.where is not None and err.where.endswith(f"test_algo.py:{_line_of('b.send((r + 1) % p, s,')}")


def test_a_double_contribution_names_the_rank_and_the_step_that_wrote_it() -> None:
    def broken(b: algo.Builder) -> None:
        ring(b, twice_on=1)

    with pytest.raises(algo.VerifyError) as e:
        algo.verify(broken, "allreduce", worlds=[2], counts=[4])
    err = e.value
    assert "contribution of rank 1 counted twice" in str(err)
    assert err.rank is not None and err.step is not None and err.operation is not None
    assert f"rank {err.rank} step {err.step} is " in str(err)


def test_an_in_place_race_names_rank_and_step() -> None:
    def broken(b: algo.Builder) -> None:
        out, other = algo.output(0, b.count), 1 - b.rank
        b.copy(algo.input(0, b.count), out)
        if b.rank == 0:
            b.send(other, 0, out)
            b.recv_reduce(other, 1, out)
        else:
            b.recv_reduce(other, 0, out)
            b.send(other, 1, algo.input(0, b.count))  # in place, Input now holds the sum

    with pytest.raises(algo.VerifyError) as e:
        algo.verify(broken, "allreduce", worlds=[2], counts=[3])
    assert (e.value.rank, e.value.step) == (1, 2)
    assert "reads Input after step 1 wrote Output[0..3]" in str(e.value)
    assert "is send(0, 1, input[0:3])" in str(e.value)


def test_a_race_in_a_json_plan_names_rank_and_step() -> None:
    doc = json.loads(algo.plan_json("allreduce", "ring", 2, 4, chunk=4))
    for step in doc["ranks"][1]["steps"]:
        step["deps"] = []
    plan = algo.Plan.from_json(json.dumps(doc))
    message, rank, step = plan.verify() or ("", None, None)
    assert rank == 1 and step is not None
    assert "data race" in message and f"rank 1 step {step}" in message


def test_builder_errors_name_the_operation() -> None:
    def unequal(b: algo.Builder) -> None:
        b.copy(algo.input(0, 2), algo.output(0, 3))

    with pytest.raises(ValueError, match=r"copy: input\[0:2\] has 2 elements, output\[0:3\] has 3"):
        algo.verify(unequal, "allreduce")
    with pytest.raises(ValueError, match="buffer must be one of input, output, scratch"):
        algo.Region("outptu", 0, 1)
    with pytest.raises(ValueError, match="outside it"):
        algo.output(0, 4).sub(2, 3)
    with pytest.raises(TypeError, match="name the collective"):
        algo.verify(ring)
    # Refused before anything is registered, so this process's algorithm lists stay as they are.
    with pytest.raises(ValueError, match="barrier algorithms order steps by hand"):
        algo.register("barrier", "mine")
    with pytest.raises(ValueError, match="unknown collective 'allsum'"):
        algo.register("allsum", "mine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="an identifier"):
        algo.register("allreduce", "my ring")


@pytest.mark.parametrize(
    ("collective", "name", "kwargs"),
    [
        ("allreduce", "ring", {}),
        ("broadcast", "binomial", {"root": 2}),
        ("allgather", "ring", {"counts": [3, 0, 1, 4]}),
        ("alltoall", "pairwise", {}),
    ],
)
def test_builtin_plans_round_trip_through_json(collective: str, name: str, kwargs: dict[str, object]) -> None:
    text = algo.plan_json(collective, name, 4, 5, chunk=2, **kwargs)  # type: ignore[arg-type]
    doc = json.loads(text)  # standard JSON
    assert doc["format"] == "shoal-plan/1" and doc["algorithm"] == f"{collective}/{name}"
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    plan = algo.Plan.from_json(text)
    assert plan.to_json() == text and plan.verify() is None
    assert plan == algo.plan(collective, name, 4, 5, chunk=2, **kwargs)  # type: ignore[arg-type]
    # What json.dumps writes reads back the same, whatever the spacing.
    assert algo.Plan.from_json(json.dumps(doc)) == plan


def test_python_plans_round_trip_and_match_the_builtin_ring() -> None:
    mine = algo.plan("allreduce", ring, 5, 13, chunk=2)
    builtin = algo.plan("allreduce", "ring", 5, 13, chunk=2)
    assert algo.Plan.from_json(mine.to_json()) == mine
    # The same operations lower to the same steps as the Rust generator's.
    assert [mine.steps(r) for r in range(5)] == [builtin.steps(r) for r in range(5)]


def test_bad_json_is_a_clear_error() -> None:
    good = json.loads(algo.plan_json("allreduce", "ring", 2, 2))
    good["ranks"][0]["steps"][0]["op"] = "sned"
    with pytest.raises(ValueError, match=r"ranks\[0\]\.steps\[0\]\.op: unknown op \"sned\""):
        algo.Plan.from_json(json.dumps(good))
    with pytest.raises(ValueError, match="invalid JSON at line 1"):
        algo.Plan.from_json("{")
    with pytest.raises(ValueError, match='missing field "shape"'):
        algo.Plan.from_json('{"format": "shoal-plan/1", "ranks": []}')


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_registered_algorithms_run_on_real_processes(transport: str, world: int) -> None:
    # The worker checks the cost model's choice: no built-in tuning table row may decide first.
    proc = launch(world, "algo.py", env={"SHOAL_TRANSPORT": transport, "SHOAL_TUNE_BUILTIN": "0"})
    assert proc.stdout.count("OK algo") == world


def test_shoal_algo_names_a_registered_algorithm() -> None:
    proc = launch(3, "algo.py", env={"SHOAL_ALGO": "allreduce:torus"})
    assert proc.stdout.count("OK algo") == 3


def test_bench_runs_an_algorithm_named_in_shoal_algorithms(tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {**os.environ, "SHOAL_ALGORITHMS": str(EXAMPLES / "torus_allreduce.py")}
    sizes = ["--sizes", "8,64K", "--iters", "3", "--warmup", "1", "--repeats", "2", "--no-progress", "--no-roofline"]
    cmd = [sys.executable, "-m", "shoal.cli", "bench", "allreduce", "-n", "4", "--algo", "torus,ring", *sizes]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "results.json").read_text())
    assert [s["name"] for s in doc["series"]] == ["shoal:torus", "shoal:ring"]
    for s in doc["series"]:
        assert s["status"] == "ok" and all(r["errors"] == 0 for r in s["results"]), s


def test_shoal_algorithms_loads_files_and_modules_once() -> None:
    code = (
        "import shoal, torus_allreduce; from shoal import algo; "
        "print(shoal.algorithms('allreduce'), shoal.algorithms('broadcast'))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(EXAMPLES),
        # The same file by path and, in the program, by module name: registered once.
        "SHOAL_ALGORITHMS": f"{EXAMPLES / 'torus_allreduce.py'}, knomial_broadcast",
    }
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("'torus'") == 1 and "'knomial'" in proc.stdout
    env["SHOAL_ALGORITHMS"] = "no/such/file.py"
    proc = subprocess.run([sys.executable, "-c", "import shoal"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode != 0 and "SHOAL_ALGORITHMS: no such file 'no/such/file.py'" in proc.stderr


def test_the_readme_algorithm_verifies_and_runs_on_four_ranks(tmp_path: Path) -> None:
    readme = (EXAMPLES.parent.parent / "README.md").read_text()
    section = readme.split("### Write an algorithm in Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)[1]  # type: ignore[index]
    script = tmp_path / "my_algos.py"
    script.write_text(
        code
        + "import numpy as np, shoal\n"
        + "g = shoal.init()\n"
        + "x = np.arange(1001, dtype=np.float32) * (g.rank + 1)\n"
        + "g.allreduce(x, algorithm='my_ring')\n"
        + "assert np.array_equal(x, np.arange(1001, dtype=np.float32) * sum(range(1, g.size + 1)))\n"
        + "print('README ALGO OK')\n"
    )
    cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", "4", "--", sys.executable, str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("README ALGO OK") == 4


def test_the_docs_show_the_ring_example_as_it_is() -> None:
    docs = (EXAMPLES.parent.parent / "docs" / "algorithms.md").read_text()
    shown = re.search(r"```python\n(.*?)```", docs, re.S)[1]  # type: ignore[index]
    example = (EXAMPLES / "ring_allreduce.py").read_text()
    assert example.endswith(shown)


def test_the_examples_verify_for_worlds_up_to_twelve() -> None:
    # In a fresh process: registering here would add names to this one's shoal.algorithms().
    code = (
        "from shoal import algo; import ring_allreduce, torus_allreduce, knomial_broadcast\n"
        "worlds = range(1, 13)\n"
        "print(algo.verify(ring_allreduce.ring, worlds=worlds), algo.verify(torus_allreduce.torus, worlds=worlds),"
        " algo.verify(knomial_broadcast.knomial, worlds=worlds))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    # Every world x count x chunk, and every root of the broadcast.
    assert proc.stdout.split() == ["120", "120", str(sum(range(1, 13)) * 5 * 2)]


def test_phases_lower_to_the_builtin_algorithms_steps() -> None:
    from shoal.algo import phases

    def ring(b: algo.Builder) -> None:
        data = algo.output(0, b.count)
        b.copy(algo.input(0, b.count), data)
        blocks = data.split(b.world)
        phases.ring_allgather(b, blocks, phases.ring_reduce_scatter(b, blocks) + 1)

    def binomial(b: algo.Builder) -> None:
        data = algo.output(0, b.count)
        if b.rank == b.root:
            b.copy(algo.input(0, b.count), data)
        phases.tree_broadcast(b, b.root, data)

    def reduce(b: algo.Builder) -> None:
        acc = algo.output(0, b.count) if b.rank == b.root else b.scratch(b.count)
        b.copy(algo.input(0, b.count), acc)
        phases.tree_reduce(b, b.root, acc)

    for world in (1, 2, 3, 5, 8):
        same = algo.plan("allreduce", ring, world, 11, chunk=2), algo.plan("allreduce", "ring", world, 11, chunk=2)
        assert [same[0].steps(r) for r in range(world)] == [same[1].steps(r) for r in range(world)]
        for root in range(world):
            ours, theirs = (algo.plan("broadcast", a, world, 7, root=root, chunk=3) for a in (binomial, "binomial"))
            assert [ours.steps(r) for r in range(world)] == [theirs.steps(r) for r in range(world)], (world, root)
    assert algo.verify(reduce, "reduce", worlds=range(1, 10)) > 0
    assert algo.verify("ring", "allreduce", worlds=[3], counts=[5], chunks=[2]) == 1


def test_an_error_in_a_phase_names_the_algorithms_line() -> None:
    from shoal.algo import phases

    def broken(b: algo.Builder) -> None:
        data = algo.output(0, b.count)
        b.copy(algo.input(0, b.count), data)
        phases.ring_reduce_scatter(b, data.split(b.world), 5 if b.rank == 0 else 0)  # rounds disagree

    with pytest.raises(algo.VerifyError) as e:
        algo.verify(broken, "allreduce", worlds=[2], counts=[2])
    assert e.value.where is not None
    assert e.value.where.endswith(f"test_algo.py:{_line_of('# rounds disagree')}")
