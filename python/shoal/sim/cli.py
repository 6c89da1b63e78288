"""``shoal sim``: simulate shoal's collectives on a network (``shoal sim plan ...``).

Each subcommand is one entry of ``SUBCOMMANDS``; ``plan`` is here, others
(``run``, ``panama``) register the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from shoal.sim import ENGINES, plan


def _plan(args: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="shoal sim plan",
        description="Simulated time of one collective call of shoal's own plans on a network.",
    )
    p.add_argument("collective", nargs="?", help="allreduce (default), broadcast, allgather, ...")
    p.add_argument(
        "--algo", help="algorithm: built-in (shoal info lists them) or registered from Python (SHOAL_ALGORITHMS)"
    )
    p.add_argument("--ranks", type=int, help="number of ranks")
    p.add_argument("--size", help="bytes per rank: 1048576, 64MiB, 40MB")
    p.add_argument("--plan", help="a plan document (shoal.algo.plan_json) instead of --algo, --ranks and --size")
    p.add_argument("--topology", required=True, help="fattree:k=16, leafspine:leaves=4,spines=2,hosts=8, star:hosts=8")
    p.add_argument("--link", help="link rate (default 10gbit)")
    p.add_argument("--latency", help="link propagation latency (default 1us)")
    p.add_argument("--buffer", help="switch output buffer per port (default 600KB)")
    p.add_argument("--tier-rates", help="link rate per tier, hosts' links first: 10gbit,40gbit,100gbit")
    p.add_argument("--engine", choices=ENGINES, default="packet", help="simulation engine (default packet)")
    p.add_argument("--ranks-per-host", type=int, default=1, help="ranks per host, in contiguous blocks (default 1)")
    p.add_argument("--seed", type=int, default=0, help="ECMP hash seed (default 0)")
    p.add_argument("--host-overhead", help="host software time per message, e.g. 450us (packet engine; default 0)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    try:
        ns = p.parse_args(args)
        if ns.plan is None and None in (ns.algo, ns.ranks, ns.size):
            p.error("give --algo, --ranks and --size, or --plan FILE.json")
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2
    try:
        r = plan(
            ns.collective,
            algo=ns.algo,
            ranks=ns.ranks,
            size=ns.size,
            topology=ns.topology,
            link=ns.link,
            latency=ns.latency,
            buffer=ns.buffer,
            engine=ns.engine,
            ranks_per_host=ns.ranks_per_host,
            seed=ns.seed,
            host_overhead=ns.host_overhead,
            document=ns.plan,
            tier_rates=ns.tier_rates,
        )
    except ValueError as e:
        print(f"shoal sim plan: {e}", file=sys.stderr)
        return 2
    if ns.json:
        print(json.dumps(r))
    else:
        size = ns.size or f"{r['bytes']}B"
        print(
            f"{r['collective']} {r['algo']} x{r['ranks']} {size} on {r['topology']} ({r['engine']} engine): "
            f"{r['time_s']:.6f} s simulated; {r['events']} events in {r['wall_s']:.3f} s "
            f"({r['events_per_s'] / 1e6:.2f} M events/s), {_cpu_rate(r)}"
        )
    return 0


def _cpu_rate(r: dict[str, Any]) -> str:
    """The engine's CPU time and events per CPU-second, when the run was long enough to time."""
    if r["cpu_s"] <= 0:
        return "too short to time its CPU"
    return f"{r['cpu_s']:.3f} s CPU ({r['events_per_cpu_s'] / 1e6:.2f} M events/CPU-s)"


def _run(args: list[str]) -> int:
    from shoal.sim import run

    return run.main(args)


def _panama(args: list[str]) -> int:
    from shoal.sim import panama

    return panama.main(args)


def _validate(args: list[str]) -> int:
    from shoal.sim import validate

    return validate.main(args)


#: Subcommand -> (handler, what it does). Each handler imports its own module when it runs,
#: so that ``shoal sim plan`` does not pay for loading the scenario runner and the testbed
#: comparison (a third of its start-up).
SUBCOMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "plan": (_plan, "simulated time of one collective call (shoal sim plan allreduce --algo ring ...)"),
    "run": (_run, "a whole scenario from a TOML file (shoal sim run CONFIG.toml --out DIR)"),
    "panama": (_panama, "reproduce PANAMA's Figs. 8-10 (shoal sim panama --out DIR)"),
    "validate": (_validate, "simulated vs measured testbed times (shoal sim validate)"),
}

USAGE = "usage: shoal sim <subcommand> [args]\n\nsubcommands:\n" + "".join(
    f"  {name:8s} {what}\n" for name, (_, what) in SUBCOMMANDS.items()
)


def main(args: list[str]) -> int:
    """Runs ``shoal sim`` with `args`; returns the exit code."""
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    entry = SUBCOMMANDS.get(args[0])
    if entry is None:
        print(f"shoal sim: unknown subcommand {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return entry[0](args[1:])
