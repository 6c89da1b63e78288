"""Plans of every rank of a call from an algorithm (built-in or Python), as
JSON, and through the Rust verifier."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from shoal import _shoal
from shoal._shoal import CallPlans
from shoal._types import CollectiveName
from shoal.algo._builder import DEFAULT_CHUNK, AlgorithmFn, Builder, Shape, describe

Plan = CallPlans
"""The plans of every rank of one call: JSON in and out, steps, verification."""


class VerifyError(ValueError):
    """The verifier rejected an algorithm's plans: ``rank`` and ``step`` say where
    (None when no single step is to blame), ``operation`` the index of the builder
    operation that made the step (Python algorithms), ``where`` its source line."""

    def __init__(
        self,
        message: str,
        shape: Shape,
        rank: int | None,
        step: int | None,
        operation: int | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(message)
        self.shape = shape
        self.rank = rank
        self.step = step
        self.operation = operation
        self.where = where


class Lowered:
    """A Python algorithm's plans for one shape, with each rank's builder (to
    name the operation a step came from)."""

    def __init__(self, name: str, fn: AlgorithmFn, shape: Shape) -> None:
        self.builders = [Builder(shape, rank) for rank in range(shape.world)]
        for b in self.builders:
            fn(b)
        ranks = [(b.scratch_len, b.ops) for b in self.builders]
        self.plan = _shoal.lower_plans(shape.as_tuple(), ranks, algorithm=f"{shape.collective}/{name}")

    def check(self, name: str, shape: Shape) -> None:
        """Raises VerifyError naming the rank, step and source line at fault."""
        found = self.plan.verify()
        if found is None:
            return
        message, rank, step = found
        text = f"{name} is wrong for {_shape_text(shape)}: {message}"
        operation = where = None
        if rank is not None and step is not None:
            operation = self.plan.origin(rank, step)
            if operation is not None:
                b = self.builders[rank]
                where = b.where[operation]
                text += f"\n  rank {rank} step {step} is {describe(b.ops[operation])} at {where}"
        raise VerifyError(text, shape, rank, step, operation, where)


def build(fn: AlgorithmFn, shape: Shape, name: str | None = None) -> Plan:
    """The plans of every rank that the Python algorithm ``fn`` makes for ``shape``."""
    return Lowered(name or fn.__name__, fn, shape).plan


def plan(
    collective: CollectiveName,
    algorithm: str | AlgorithmFn,
    world: int,
    count: int,
    *,
    root: int = 0,
    chunk: int = DEFAULT_CHUNK,
    ranks_per_host: int = 1,
    counts: Sequence[int] | None = None,
) -> Plan:
    """The plans of every rank of one call, from a built-in algorithm's name,
    a registered Python algorithm's name, or an algorithm function."""
    shape = Shape(collective, world, count, root, chunk, ranks_per_host, None if counts is None else tuple(counts))
    if callable(algorithm):
        return build(algorithm, shape)
    from shoal.algo._registry import registered  # the registry builds on this module

    python = registered(collective, algorithm)
    if python is not None:
        return build(python.fn, shape, python.name)
    return _shoal.builtin_plans(shape.as_tuple(), algorithm)


def plan_json(
    collective: CollectiveName,
    algorithm: str | AlgorithmFn,
    world: int,
    count: int,
    *,
    root: int = 0,
    chunk: int = DEFAULT_CHUNK,
    ranks_per_host: int = 1,
    counts: Sequence[int] | None = None,
) -> str:
    """``plan(...)`` as a JSON document (schema: docs/algorithms.md)."""
    p = plan(collective, algorithm, world, count, root=root, chunk=chunk, ranks_per_host=ranks_per_host, counts=counts)
    text: str = p.to_json()
    return text


WORLDS = (1, 2, 3, 4, 5, 7, 8)
COUNTS = (0, 1, 5, 13, 64)
CHUNKS = (3, DEFAULT_CHUNK)


def verify(
    algorithm: AlgorithmFn | str,
    collective: CollectiveName | None = None,
    *,
    worlds: Iterable[int] = WORLDS,
    counts: Iterable[int] = COUNTS,
    chunks: Iterable[int] = CHUNKS,
    roots: Iterable[int] | None = None,
) -> int:
    """Verifies an algorithm for every combination of world size, count, chunk
    and root (rooted collectives: every rank unless ``roots`` is given) and
    returns how many calls it checked; raises VerifyError at the first
    violation, naming the rank, the step and, for a Python algorithm, the
    line that made the step. ``algorithm`` is an algorithm function (then
    ``collective`` is required) or a registered or built-in name."""
    fn, name, collective = _resolve(algorithm, collective)
    checked = 0
    for world in worlds:
        for count in counts:
            for chunk in chunks:
                base = Shape(collective, world, count, chunk=chunk)
                rooted = collective in ("broadcast", "reduce", "gather", "scatter")
                for root in (roots if roots is not None else range(world)) if rooted else (0,):
                    if not 0 <= root < world:
                        continue
                    shape = replace(base, root=root)
                    _verify_one(fn, name, shape)
                    checked += 1
    return checked


def _verify_one(fn: AlgorithmFn | None, name: str, shape: Shape) -> None:
    if fn is not None:
        Lowered(name, fn, shape).check(name, shape)
        return
    found = _shoal.builtin_plans(shape.as_tuple(), name).verify()
    if found is not None:
        message, rank, step = found
        raise VerifyError(f"{name} is wrong for {_shape_text(shape)}: {message}", shape, rank, step)


def _resolve(
    algorithm: AlgorithmFn | str, collective: CollectiveName | None
) -> tuple[AlgorithmFn | None, str, CollectiveName]:
    from shoal.algo._registry import Algorithm, registered

    if isinstance(algorithm, Algorithm):
        return algorithm.fn, algorithm.name, algorithm.collective
    if collective is None:
        raise TypeError("verify: name the collective (collective='allreduce', ...)")
    if callable(algorithm):
        return algorithm, algorithm.__name__, collective
    python = registered(collective, algorithm)
    if python is not None:
        return python.fn, python.name, collective
    return None, algorithm, collective


def _shape_text(s: Shape) -> str:
    root = f", root={s.root}" if s.collective in ("broadcast", "reduce", "gather", "scatter") else ""
    return f"{s.collective}(world={s.world}, count={s.count}, chunk={s.chunk}{root})"
