"""Collective algorithms written in Python.

An algorithm is a function that gets a :class:`Builder` for one rank of one
call shape and records, in program order, what that rank sends, receives,
copies and reduces; the Rust plan builder lowers it to steps (inferring every
dependency and pipelining transfers) exactly as it does the built-in
algorithms. :func:`verify` runs the Rust verifier over world sizes and counts,
:func:`plan_json` writes the plans of a call as JSON, and :func:`register`
makes an algorithm available to ``algorithm=``, ``SHOAL_ALGO``,
``shoal bench --algo`` and the selector. See docs/algorithms.md."""

from shoal.algo import phases
from shoal.algo._builder import DEFAULT_CHUNK, AlgorithmFn, Builder, Region, Shape, input, output
from shoal.algo._plan import Plan, VerifyError, build, plan, plan_json, verify
from shoal.algo._registry import Algorithm, Cost, register, registered, registry

__all__ = [
    "DEFAULT_CHUNK",
    "Algorithm",
    "AlgorithmFn",
    "Builder",
    "Cost",
    "Plan",
    "Region",
    "Shape",
    "VerifyError",
    "build",
    "input",
    "output",
    "phases",
    "plan",
    "plan_json",
    "register",
    "registered",
    "registry",
    "verify",
]
