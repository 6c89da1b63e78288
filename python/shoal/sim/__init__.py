"""shoal's network simulator (crate shoal-sim): run shoal's own plans on simulated networks.

``plan(...)`` simulates one collective call on a topology and returns its report::

    >>> from shoal import sim
    >>> r = sim.plan("allreduce", algo="ring", ranks=16, size="64MiB", topology="fattree:k=4")
    >>> r["time_s"], r["events_per_s"]

See docs/sim.md for the model and the engines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal._shoal import CallPlans

#: The engines ``plan`` accepts.
ENGINES = ("packet", "flow")


def plan(
    collective: str | None = None,
    *,
    algo: str | None = None,
    ranks: int | None = None,
    size: str | int | None = None,
    topology: str,
    link: str | None = None,
    latency: str | None = None,
    buffer: str | None = None,
    engine: str = "packet",
    ranks_per_host: int = 1,
    seed: int = 0,
    host_overhead: str | None = None,
    document: str | Path | CallPlans | None = None,
    tier_rates: str | None = None,
) -> dict[str, Any]:
    """Simulates one call of `collective` (allreduce if not given) with algorithm `algo` on `ranks`
    ranks of `size` bytes each.

    `algo` is any algorithm the executor runs: built-in, or registered with ``shoal.algo.register``
    (in this process or through SHOAL_ALGORITHMS); each rank's plan is the one the executor would run.
    `document` (a ``shoal-plan/1`` JSON file, or a ``shoal.algo.Plan``) is simulated instead of a
    named algorithm: it fixes its own collective, ranks and size (fp32 elements), so giving `algo`,
    `ranks` or `size` with it, or a `collective` it does not do, is a ``ValueError``.
    `topology` is ``fattree:k=K``, ``leafspine:leaves=L,spines=S,hosts=H`` or ``star:hosts=N``;
    `link`, `latency` and `buffer` set every link (``"10gbit"``, ``"1us"``, ``"600KB"``);
    `tier_rates` (``"10gbit,40gbit"``) sets the rate of each tier of links, hosts' links first;
    `host_overhead` (``"450us"``, packet engine) delays every message by the hosts' software time.
    Returns the report: ``time_s`` (simulated), ``events``, ``events_per_s``, ``wall_s`` and
    what was simulated. Raises ``ValueError`` naming a bad argument.
    """
    from shoal._shoal import sim_plan_json

    plans = _document(document)
    if plans is None and (algo is None or ranks is None or size is None):
        raise ValueError("plan: give algo, ranks and size, or a plan document")
    if plans is not None:
        _check_document_alone(plans, collective, algo=algo, ranks=ranks, size=size)
    if ranks is not None and ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    report = sim_plan_json(
        collective or "allreduce",
        algo or "",
        ranks or 1,
        str(size or 0),
        topology,
        link=link,
        latency=latency,
        buffer=buffer,
        engine=engine,
        ranks_per_host=ranks_per_host,
        seed=seed,
        host_overhead=host_overhead,
        plans=plans,
        tier_rates=tier_rates,
    )
    result: dict[str, Any] = json.loads(report)
    return result


def _check_document_alone(plans: CallPlans, collective: str | None, **named: object) -> None:
    """A document fixes the call: an argument that would be silently replaced is an error."""
    given = [name for name, value in named.items() if value is not None]
    if given:
        raise ValueError(f"plan: a plan document fixes its own ranks and size; leave out {', '.join(given)}")
    doc_collective = plans.shape[0]
    if collective is not None and collective != doc_collective:
        raise ValueError(f"plan: the plan document is for {doc_collective}, not {collective}")


#: The largest plan document read (1024 ranks of a ring allreduce take about 300 MB).
MAX_DOCUMENT_BYTES = 1 << 30


def _document(document: str | Path | CallPlans | None) -> CallPlans | None:
    """The plans of a document given as a file or already read."""
    from shoal._files import UnreadableFile, read_regular
    from shoal._shoal import CallPlans

    if document is None or isinstance(document, CallPlans):
        return document
    try:
        text = read_regular(Path(document), MAX_DOCUMENT_BYTES).decode()
    except (OSError, UnreadableFile, UnicodeDecodeError) as e:
        raise ValueError(f"{document}: {e}") from None
    return CallPlans.from_json(text)


__all__ = ["ENGINES", "plan"]
