"""The ``shoal`` command: one subcommand per tool (``shoal run``, ``shoal info``, ...).

Subcommands import their modules only when chosen, so ``shoal run`` and
``shoal --version`` work before (and without) the compiled extension.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Iterable

#: Subcommand -> what it does, in the order of the usage text.
COMMANDS = {
    "run": "launch N local ranks of a program (like torchrun --standalone / mpirun)",
    "secret": "print a new random job secret (export SHOAL_SECRET=$(shoal secret) for torchrun/srun/mpirun)",
    "switch": "run the in-network aggregation switch daemon (shoal switch --help)",
    "info": "print version, algorithms, configuration, transports and capabilities (shoal info --json)",
    "bench": "benchmark a collective side by side with Gloo and OpenMPI (shoal bench -h)",
    "testbed": "emulated cluster: hosts as network namespaces behind a shaped switch (shoal testbed -h)",
    "sim": "simulate shoal's collectives on a network: fat-tree, leaf-spine, star (shoal sim -h)",
    "trace": "merge the per-rank traces of SHOAL_TRACE=DIR into one timeline (shoal trace merge DIR -o job.json)",
}

USAGE = "usage: shoal [--version] <command> [args]\n\ncommands:\n" + "".join(
    f"  {name:10s} {what}\n" for name, what in COMMANDS.items()
)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'run'?"`` when `word` is a near miss of one of `choices`, else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def version() -> str:
    """shoal's version: from the installed package's metadata (no need to load the extension)."""
    from importlib import metadata

    try:
        return metadata.version("shoal")
    except metadata.PackageNotFoundError:
        import shoal

        return str(shoal.__version__)


def _info(args: list[str]) -> int:
    """`shoal info [--json]`."""
    p = argparse.ArgumentParser(
        prog="shoal info",
        description="Version, algorithms, every SHOAL_* variable (value and source), transports, "
        "capabilities of this machine, the detected launcher and in-network aggregation.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    try:
        ns = p.parse_args(args)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2
    from shoal.info import render, report

    r = report()
    print(json.dumps(r, indent=2) if ns.json else render(r))
    return 0


SECRET_USAGE = """usage: shoal secret

Prints a new random job secret (32 random bytes, hex). `shoal run` gives its
ranks one by itself; under torchrun, srun or mpirun give every rank the same one:
  export SHOAL_SECRET=$(shoal secret)
"""


def _secret(args: list[str]) -> int:
    """`shoal secret`: prints a new random job secret."""
    if args in (["-h"], ["--help"]):
        print(SECRET_USAGE)
        return 0
    if args:
        print(f"shoal secret: unexpected arguments: {' '.join(args)}\n\n{SECRET_USAGE}", file=sys.stderr)
        return 2
    from shoal.launcher import new_secret

    print(new_secret())
    return 0


def _run(args: list[str]) -> int:
    from shoal.launcher import main as run_main

    return run_main(args)


def _switch(args: list[str]) -> int:
    from shoal._shoal import switch_main

    return int(switch_main(args))


def _testbed(args: list[str]) -> int:
    from shoal.testbed import main as testbed_main

    return int(testbed_main(args))


def _bench(args: list[str]) -> int:
    from shoal.bench.cli import main as bench_main

    return int(bench_main(args))


def _sim(args: list[str]) -> int:
    from shoal.sim.cli import main as sim_main

    return sim_main(args)


def _trace(args: list[str]) -> int:
    from shoal.trace import main as trace_main

    return trace_main(args)


HANDLERS = {
    "run": _run,
    "secret": _secret,
    "switch": _switch,
    "info": _info,
    "bench": _bench,
    "testbed": _testbed,
    "sim": _sim,
    "trace": _trace,
}


def main(argv: list[str] | None = None) -> int:
    """Runs the ``shoal`` command with `argv` (default: the process's arguments); returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"shoal {version()}")
        return 0
    command, rest = args[0], args[1:]
    handler = HANDLERS.get(command)
    if handler is None:
        hint = did_you_mean(command, COMMANDS)
        print(f"shoal: unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        return handler(rest)
    except BrokenPipeError:
        # The reader went away (`shoal info | head`): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
