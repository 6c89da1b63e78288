"""The emulated cluster testbed (`shoal testbed`): hosts as network namespaces behind a shaped switch.

Modules: :mod:`~shoal.testbed.cli` (the subcommands, and ``up``/``down``/
``rank_specs`` for programs), :mod:`~shoal.testbed.netns` (namespaces, veths,
bridge), :mod:`~shoal.testbed.shaping` (link parameters and their ``tc``
commands), :mod:`~shoal.testbed.state` (the state file) and
:mod:`~shoal.testbed.measure` (a throughput/RTT probe run inside the hosts).
See docs/testbed.md.
"""

from __future__ import annotations


def main(argv: list[str]) -> int:
    """`shoal testbed ARGS`; returns the exit code."""
    from shoal.testbed.cli import main as cli_main

    return cli_main(argv)
