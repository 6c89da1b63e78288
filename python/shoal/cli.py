"""The ``shoal`` command: ``shoal run`` launches local ranks; more subcommands join as they land."""

from __future__ import annotations

import sys

USAGE = """usage: shoal <command> [args]

commands:
  run        launch N local ranks of a program (like torchrun --standalone / mpirun)
  info       print version, algorithms and configuration
"""


def _info() -> int:
    import shoal

    print(f"shoal {shoal.__version__}")
    for coll in (
        "allreduce",
        "broadcast",
        "reduce",
        "allgather",
        "reduce_scatter",
        "alltoall",
        "gather",
        "scatter",
        "barrier",
    ):
        print(f"  {coll:15s} {', '.join(shoal.algorithms(coll))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "run":
        from shoal.launcher import main as run_main

        return run_main(rest)
    if command == "info":
        return _info()
    print(f"shoal: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
