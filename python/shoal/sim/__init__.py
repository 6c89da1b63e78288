"""shoal's network simulator (crate shoal-sim): run shoal's own plans on simulated networks.

``plan(...)`` simulates one collective call on a topology and returns its report::

    >>> from shoal import sim
    >>> r = sim.plan("allreduce", algo="ring", ranks=16, size="64MiB", topology="fattree:k=4")
    >>> r["time_s"], r["events_per_s"]

See docs/sim.md for the model and the engines.
"""

from __future__ import annotations

import json
from typing import Any

#: The engines ``plan`` accepts.
ENGINES = ("packet", "flow")


def plan(
    collective: str,
    *,
    algo: str,
    ranks: int,
    size: str | int,
    topology: str,
    link: str | None = None,
    latency: str | None = None,
    buffer: str | None = None,
    engine: str = "packet",
    ranks_per_host: int = 1,
    seed: int = 0,
    host_overhead: str | None = None,
) -> dict[str, Any]:
    """Simulates one call of `collective` with algorithm `algo` on `ranks` ranks of `size` bytes each.

    `topology` is ``fattree:k=K``, ``leafspine:leaves=L,spines=S,hosts=H`` or ``star:hosts=N``;
    `link`, `latency` and `buffer` set every link (``"10gbit"``, ``"1us"``, ``"600KB"``);
    `host_overhead` (``"450us"``, packet engine) delays every message by the hosts' software time.
    Returns the report: ``time_s`` (simulated), ``events``, ``events_per_s``, ``wall_s`` and
    what was simulated. Raises ``ValueError`` naming a bad argument.
    """
    from shoal._shoal import sim_plan_json

    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    report = sim_plan_json(
        collective,
        algo,
        ranks,
        str(size),
        topology,
        link=link,
        latency=latency,
        buffer=buffer,
        engine=engine,
        ranks_per_host=ranks_per_host,
        seed=seed,
        host_overhead=host_overhead,
    )
    result: dict[str, Any] = json.loads(report)
    return result


__all__ = ["ENGINES", "plan"]
