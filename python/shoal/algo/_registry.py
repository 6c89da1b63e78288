"""Python algorithms registered under a name, so ``algorithm=``, SHOAL_ALGO,
``shoal bench --algo`` and the selector find them like built-in ones."""

from __future__ import annotations

import collections
import hashlib
import types
from dataclasses import dataclass, replace
from typing import Callable, Union, get_args

from shoal import _shoal
from shoal._types import CollectiveName
from shoal.algo._builder import AlgorithmFn, Builder, OpTuple, Shape, ShapeTuple
from shoal.algo._plan import Lowered

Factor = Union[float, Callable[[int], float]]
"""A cost factor: a number, or a function of the group size ``p``."""


@dataclass(frozen=True)
class Cost:
    """The selector's estimate of a call, the alpha-beta-gamma model of the
    built-in algorithms: ``messages`` messages in sequence on the busiest rank
    (each costs the latency alpha), ``bytes`` times the per-rank buffer
    (count x element size) moved through that rank's link (beta per byte),
    ``reduced`` times the per-rank buffer reduced locally (gamma per byte).
    Each is a number or a function of the group size ``p``, evaluated once per
    group size. A ring allreduce is ``Cost(messages=lambda p: 2 * (p - 1),
    bytes=lambda p: 2 * (p - 1) / p, reduced=lambda p: (p - 1) / p)``."""

    messages: Factor
    bytes: Factor
    reduced: Factor = 0.0

    def at(self, world: int) -> tuple[float, float, float]:
        """The three factors for a group of ``world`` ranks."""
        return (_factor(self.messages, world), _factor(self.bytes, world), _factor(self.reduced, world))


def _factor(f: Factor, world: int) -> float:
    value = float(f(world) if callable(f) else f)
    if not value >= 0.0:  # also catches NaN
        raise ValueError(f"cost factors must be non-negative numbers; got {value} for p={world}")
    return value


@dataclass(frozen=True)
class Algorithm:
    """A registered Python algorithm."""

    collective: CollectiveName
    name: str
    fn: AlgorithmFn
    cost: Cost | None


_REGISTRY: dict[tuple[str, str], Algorithm] = {}

VERIFY_WORLDS = 64
"""Registered algorithms are verified (all ranks) the first time a call shape is
seen in groups up to this size; larger groups get the per-rank checks only."""

SHAPES_REMEMBERED = 1024
"""How many call shapes the source remembers as verified, with their digests
(least recently used first out, as a communicator's 1024 first-use records):
a job that makes calls of ever new shapes re-verifies an evicted one instead of
growing without bound."""

VERIFY_ELEMENTS = 1 << 16
"""Building every rank's plans takes time with the count, so a call of more
elements (count x world) is verified at the same shape with a count of this
size / world; the plan that runs still gets the per-rank checks (bounds, peers,
scratch within its limit) before it runs."""


def registered(collective: str, name: str) -> Algorithm | None:
    """The Python algorithm registered as ``collective/name``, if any."""
    return _REGISTRY.get((collective, name))


def registry() -> list[Algorithm]:
    """Every registered Python algorithm."""
    return list(_REGISTRY.values())


def register(collective: CollectiveName, name: str, *, cost: Cost | None = None) -> Callable[[AlgorithmFn], Algorithm]:
    """Registers the decorated function as algorithm ``name`` of ``collective``,
    for every call made from this process: ``algorithm=name``,
    ``SHOAL_ALGO=collective:name`` (register before ``shoal.init``) and, given a
    ``cost``, the selector. Every rank must register it, with the same definition
    (the ranks compare it at the first use of each call shape: docs/algorithms.md);
    an algorithm's identity in messages is a hash of ``collective/name``, so the
    order does not matter. A name a built-in algorithm has, or one registered
    before, is a ValueError."""
    if collective not in get_args(CollectiveName):
        raise ValueError(f"register: unknown collective {collective!r}")
    if collective == "barrier":
        # Its messages carry no data, so the builder could infer no ordering from them.
        raise ValueError("register: barrier algorithms order steps by hand; write them in Rust")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register: an algorithm name is an identifier, got {name!r}")
    if cost is not None and not isinstance(cost, Cost):
        raise TypeError(f"register: cost must be a shoal.algo.Cost, got {type(cost).__name__}")

    def decorate(fn: AlgorithmFn) -> Algorithm:
        known = _REGISTRY.get((collective, name))
        if known is not None and _same_code(known.fn, fn):
            return known  # the same file loaded twice (SHOAL_ALGORITHMS and an import)
        _shoal.register_algorithm(collective, name, _SOURCE)
        alg = Algorithm(collective, name, fn, cost)
        _REGISTRY[(collective, name)] = alg
        return alg

    return decorate


def _same_code(a: AlgorithmFn, b: AlgorithmFn) -> bool:
    """Whether two functions are one definition (same file and line)."""
    where = [(c.co_filename, c.co_firstlineno) for c in (getattr(f, "__code__", None) for f in (a, b)) if c]
    return len(where) == 2 and where[0] == where[1]


class _Source:
    """What the core asks, on the calling thread, when a cache misses: a
    registered algorithm's operations for one rank of one call shape, and its
    cost factors for one group size."""

    def __init__(self) -> None:
        # (collective, name, shape) -> (plans digest, verified here): a digest
        # computed for another group's cached plan is known without verifying.
        self.shapes: collections.OrderedDict[tuple[str, str, Shape], tuple[int, bool]] = collections.OrderedDict()

    def _recall(self, key: tuple[str, str, Shape]) -> tuple[int, bool] | None:
        known = self.shapes.get(key)
        if known is not None:
            self.shapes.move_to_end(key)
        return known

    def _remember(self, key: tuple[str, str, Shape], digest: int, verified: bool) -> None:
        self.shapes[key] = (digest, verified)
        self.shapes.move_to_end(key)
        while len(self.shapes) > SHAPES_REMEMBERED:
            self.shapes.popitem(last=False)

    def plan(self, collective: str, name: str, shape_tuple: ShapeTuple, rank: int) -> tuple[int, list[OpTuple]]:
        alg = _REGISTRY[(collective, name)]
        shape = Shape.from_tuple(shape_tuple)
        key = (collective, name, shape)
        known = self._recall(key)
        if shape.world <= VERIFY_WORLDS and not (known and known[1]):
            # Every rank verifies the same plans, so all raise the same error
            # instead of some hanging on a broken plan.
            small = shape.world * shape.count <= VERIFY_ELEMENTS
            probe = shape if small else replace(shape, count=VERIFY_ELEMENTS // shape.world)
            lowered = Lowered(name, alg.fn, probe)
            lowered.check(name, probe)
            self._remember(key, _plans_digest(lowered), verified=True)
            if small:
                b = lowered.builders[rank]
                return (b.scratch_len, b.ops)
        # Verified above (or too large to verify whole): no error will name a line.
        b = Builder(shape, rank, lines=False)
        alg.fn(b)
        return (b.scratch_len, b.ops)

    def digest(self, collective: str, name: str, shape_tuple: ShapeTuple) -> int:
        """What the ranks compare at the first use of a call shape: a digest of
        the plans of every rank that this rank's definition makes at the shape
        the verification probed (built by it, asked after ``plan``); in groups
        above VERIFY_WORLDS, which are not verified, of the function's code."""
        alg = _REGISTRY[(collective, name)]
        shape = Shape.from_tuple(shape_tuple)
        if shape.world > VERIFY_WORLDS:
            return _code_digest(alg.fn)
        key = (collective, name, shape)
        known = self._recall(key)
        if known is not None:
            return known[0]
        # the plan came from the cache of another group (or was evicted here)
        small = shape.world * shape.count <= VERIFY_ELEMENTS
        probe = shape if small else replace(shape, count=VERIFY_ELEMENTS // shape.world)
        digest = _plans_digest(Lowered(name, alg.fn, probe))
        self._remember(key, digest, verified=False)
        return digest

    def cost(self, collective: str, name: str, world: int) -> tuple[float, float, float] | None:
        alg = _REGISTRY[(collective, name)]
        return None if alg.cost is None else alg.cost.at(world)


def _plans_digest(lowered: Lowered) -> int:
    """64 bits of BLAKE2b over the plans' JSON document."""
    text: str = lowered.plan.to_json()
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _code_digest(fn: AlgorithmFn) -> int:
    """64 bits of BLAKE2b over the function's code: its bytecode, constants
    (nested functions' code included) and names, not where it was written."""
    h = hashlib.blake2b(digest_size=8)

    def add(c: object) -> None:
        if isinstance(c, types.CodeType):
            h.update(c.co_code)
            h.update(repr(c.co_names).encode())
            add(c.co_consts)
        elif isinstance(c, tuple):
            h.update(b"(")
            for item in c:
                add(item)
            h.update(b")")
        elif isinstance(c, frozenset):  # its order changes with the hash seed
            h.update(repr(sorted(repr(item) for item in c)).encode())
        else:
            h.update(repr(c).encode())

    code = getattr(fn, "__code__", None)
    if code is None:  # a callable object: its type's __call__
        code = getattr(type(fn).__call__, "__code__", None)
    add(code)
    return int.from_bytes(h.digest(), "little")


_SOURCE = _Source()
