"""The ranks agree on what they run: at init on the build (version and the
built-in algorithms), at the first use of a call shape on the algorithm chosen
and, for a registered one, its definition. A disagreement is the same error
on every rank, naming the algorithm and the ranks; nobody returns wrong sums."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import launch, spawn_ranks

from shoal import algo


def raised(results: list[subprocess.CompletedProcess[str]]) -> list[str]:
    """Every rank's `RAISED <type>: <message>` line, failing if a rank has none."""
    lines = []
    for r, res in enumerate(results):
        m = re.search(r"^RAISED (\w+): (.*)$", res.stdout, re.M)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr[-3000:]}"
        assert "RESULT" not in res.stdout, (r, res.stdout)
        lines.append(f"{m[1]}: {m[2]}")
    return lines


def by_rank(proc: subprocess.CompletedProcess[str], world: int) -> list[str]:
    """The launcher's output, split back per rank (`[r]: ` prefixes)."""
    out = [""] * world
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        m = re.match(r"\[(\d+)\]: (.*)", line)
        if m:
            out[int(m[1])] += m[2] + "\n"
    return out


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_different_definitions_under_one_name_raise_on_every_rank(transport: str, world: int) -> None:
    env = {"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "60"}
    results = spawn_ranks(world, "agree.py", "definitions", env=env, timeout=120)
    even = list(range(0, world, 2))
    odd = list(range(1, world, 2))
    lines = raised(results)
    assert len(set(lines)) == 1, lines  # the same verdict everywhere
    assert lines[0].startswith("MismatchError: "), lines[0]
    assert "allreduce algorithm 'halves'" in lines[0], lines[0]
    assert f"ranks {even} define it one way, ranks {odd} another" in lines[0], lines[0]
    for r, res in enumerate(results):
        assert res.returncode == 0, (r, res.stdout, res.stderr[-3000:])
        # The same call raises the same error again; the group lives on.
        assert f"SECOND {lines[0]}" in res.stdout, (r, res.stdout)
        assert "ALIVE" in res.stdout, (r, res.stdout)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_the_same_definition_everywhere_runs_and_matches_numpy(transport: str) -> None:
    proc = launch(3, "agree.py", "same", env={"SHOAL_TRANSPORT": transport})
    assert proc.stdout.count("RESULT right") == 3, proc.stdout
    assert proc.stdout.count("ALIVE") == 3, proc.stdout


def test_different_shoal_algo_names_both_choices_on_every_rank() -> None:
    algos = {0: "ring", 1: "recursive_doubling", 2: "ring"}
    results = spawn_ranks(
        3,
        "agree.py",
        "choice",
        env={"SHOAL_TIMEOUT": "60"},
        rank_env=lambda r: {"SHOAL_ALGO": f"allreduce:{algos[r]}"},
    )
    lines = raised(results)
    assert len(set(lines)) == 1, lines
    assert lines[0].startswith("MismatchError: mismatched collectives: allreduce(count=36, dtype=float64, op=sum)")
    assert "ranks [0, 2] run 'ring', ranks [1] run 'recursive_doubling'" in lines[0], lines[0]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_cost_registered_on_some_ranks_only_is_a_disagreement(transport: str) -> None:
    env = {"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "60", "SHOAL_TUNE_BUILTIN": "0"}
    results = spawn_ranks(2, "agree.py", "cost", env=env)
    lines = raised(results)
    assert len(set(lines)) == 1, lines
    # Rank 1 never registered `halves`, yet names it: the names travel with the digests.
    assert re.search(r"ranks \[0\] run 'halves', ranks \[1\] run '\w+'", lines[0]), lines[0]


def test_a_slow_builder_is_called_once_per_rank_and_the_timeout_says_why() -> None:
    env = {"SHOAL_TIMEOUT": "3"}
    results = spawn_ranks(2, "agree.py", "slow", "2.5", env=env, timeout=120)
    m = re.search(r"^RAISED (\w+): (.*)$", results[0].stdout, re.M)
    assert m, results[0].stdout + results[0].stderr[-3000:]
    assert m[1] == "ShoalTimeoutError", m[0]
    assert "rank 1 stopped progressing" in m[2], m[2]
    assert "preparing a call (e.g. building a registered algorithm's plan)" in m[2], m[2]
    for r, res in enumerate(results):
        assert "BUILDS [0, 1]" in res.stdout, (r, res.stdout, res.stderr[-3000:])


def test_every_rank_checks_the_build_at_init() -> None:
    proc = launch(2, "agree.py", "same", env={"SHOAL_LOG": "debug"})
    logs = by_rank(proc, 2)
    for r in range(2):
        assert re.search(r"every rank runs shoal \S+ \(built-in algorithms [0-9a-f]{16}\)", logs[r]), logs[r][-3000:]


def test_large_groups_compare_the_functions_code_not_where_it_was_written(monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal.algo import _registry

    def one(b: algo.Builder) -> None:
        b.copy(algo.input(0, b.count), algo.output(0, b.count))
        if b.rank in {1, 2, 3}:
            b.world + 1

    def same_code_elsewhere(b: algo.Builder) -> None:
        b.copy(algo.input(0, b.count), algo.output(0, b.count))
        if b.rank in {1, 2, 3}:
            b.world + 1

    def other_constant(b: algo.Builder) -> None:
        b.copy(algo.input(0, b.count), algo.output(0, b.count))
        if b.rank in {1, 2, 4}:
            b.world + 1

    digest = _registry._code_digest
    assert digest(one) == digest(same_code_elsewhere)
    assert digest(one) != digest(other_constant)
    # Above VERIFY_WORLDS the source answers with the code digest, building nothing.
    monkeypatch.setitem(
        _registry._REGISTRY, ("allreduce", "agree_big"), algo.Algorithm("allreduce", "agree_big", one, None)
    )
    shape = ("allreduce", _registry.VERIFY_WORLDS + 1, 10, 0, 64, 1, None)
    assert _registry._SOURCE.digest("allreduce", "agree_big", shape) == digest(one)


def test_the_code_digest_does_not_depend_on_the_hash_seed() -> None:
    code = (
        "from shoal.algo._registry import _code_digest\n"
        "def f(b):\n    return b in {'ring', 'tree', 'halves', 'direct'}\n"
        "print(_code_digest(f))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(seen) == 1 and seen != {""}, seen


def test_the_source_remembers_a_bounded_number_of_call_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose calls take ever new shapes must not grow the verified set
    without bound; an evicted shape is verified again (every rank's plans built)."""
    from shoal.algo import _registry, phases

    built_ranks: list[int] = []

    def tree(b: algo.Builder) -> None:
        built_ranks.append(b.rank)
        data = algo.output(0, b.count)
        if b.rank == b.root:
            b.copy(algo.input(0, b.count), data)
        phases.tree_broadcast(b, b.root, data)

    monkeypatch.setitem(
        _registry._REGISTRY,
        ("broadcast", "bounded_shapes"),
        algo.Algorithm("broadcast", "bounded_shapes", tree, None),
    )
    monkeypatch.setattr(_registry, "SHAPES_REMEMBERED", 4)
    source = _registry._Source()
    world = 3
    for count in range(1, 11):
        source.plan("broadcast", "bounded_shapes", ("broadcast", world, count, 0, 64, 1, None), 0)
        source.digest("broadcast", "bounded_shapes", ("broadcast", world, count, 0, 64, 1, None))
    assert len(source.shapes) == 4
    built_ranks.clear()
    source.plan("broadcast", "bounded_shapes", ("broadcast", world, 1, 0, 64, 1, None), 0)
    assert sorted(built_ranks) == list(range(world)), "an evicted shape is verified again"
    built_ranks.clear()
    source.plan("broadcast", "bounded_shapes", ("broadcast", world, 10, 0, 64, 1, None), 0)
    assert built_ranks == [0], "a remembered shape builds only the calling rank's plan"
