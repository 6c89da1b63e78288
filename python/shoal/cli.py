"""The ``shoal`` command: ``shoal run`` launches local ranks; more subcommands join as they land."""

from __future__ import annotations

import sys

USAGE = """usage: shoal <command> [args]

commands:
  run        launch N local ranks of a program (like torchrun --standalone / mpirun)
  secret     print a new random job secret (export SHOAL_SECRET=$(shoal secret) for torchrun/srun/mpirun)
  switch     run the in-network aggregation switch daemon (shoal switch --help)
  info       print version, algorithms and configuration
  bench      benchmark a collective side by side with Gloo and OpenMPI (shoal bench -h)
  testbed    emulated cluster: hosts as network namespaces behind a shaped switch (shoal testbed -h)
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "run":
        from shoal.launcher import main as run_main

        return run_main(rest)
    if command == "secret":
        return _secret(rest)
    if command == "switch":
        from shoal._shoal import switch_main

        return switch_main(rest)
    if command == "testbed":
        from shoal.testbed import main as testbed_main

        return testbed_main(rest)
    if command == "info":
        return _info()
    if command == "bench":
        from shoal.bench.cli import main as bench_main

        return bench_main(rest)
    print(f"shoal: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
