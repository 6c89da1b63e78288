"""``shoal testbed bench COLLECTIVE``: ``shoal bench`` with every library's ranks on the emulated hosts.

    shoal testbed up --hosts 4 --ranks-per-host 2 --link 1gbit
    shoal testbed bench allreduce --sizes 64K:64M --algo all --against mpi,gloo

Same options, worker loop, checking and report as ``shoal bench`` (see
:mod:`shoal.bench.cli`), but the jobs are placed on the testbed: shoal and
Gloo through ``shoal testbed run`` (ranks in their hosts' namespaces, Gloo on
the hosts' ``eth0``), OpenMPI through mpirun on host 0, which starts its
daemons on the other hosts through :mod:`shoal.testbed.mpi_agent`. OpenMPI
then uses shared memory inside a host and TCP over the shaped links between
hosts, as shoal does. The tables compare bus bandwidth with the link's
goodput instead of the memory roofline.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from shoal.bench import cli as bench_cli
from shoal.launcher import positive_int
from shoal.testbed import netns
from shoal.testbed.mpi_agent import agent_command, host_argv
from shoal.testbed.netns import TestbedError
from shoal.testbed.state import HOST_DEV, State, default_name

PROG = "shoal testbed bench"


@dataclass(frozen=True)
class Placement:
    """A job's ranks on the testbed: the first `hosts` hosts of `state`, `ranks_per_host` on each,
    rank r on host r // ranks_per_host (block) or r % hosts (cyclic)."""

    state: State
    hosts: int
    ranks_per_host: int
    mode: str = "block"

    #: the interface every host reaches the others through
    interface = HOST_DEV

    @property
    def nprocs(self) -> int:
        return self.hosts * self.ranks_per_host

    @property
    def switch(self) -> bool:
        """Whether the ranks get SHOAL_SWITCH (the testbed was brought up with --switch)."""
        return self.state.switch is not None

    def shape(self) -> str:
        return f"{self.hosts}x{self.ranks_per_host}"

    def host_names(self) -> list[str]:
        return [h.ns for h in self.state.hosts[: self.hosts]]

    def run_argv(self, command: list[str]) -> list[str]:
        """``shoal testbed run`` of `command` with this placement (torchrun's and shoal's environment)."""
        return [
            sys.executable, "-m", "shoal.cli", "testbed", "run", "--name", self.state.name,
            "--hosts", str(self.hosts), "--ranks-per-host", str(self.ranks_per_host),
            "--placement", self.mode, "--no-prefix", "--", *command,
        ]  # fmt: skip

    def mpirun_argv(self, mpi_args: list[str], command: list[str]) -> list[str]:
        """mpirun of `command` with this placement, itself started on host 0."""
        names = self.host_names()
        argv = [
            "mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(self.nprocs),
            "-H", ",".join(f"{n}:{self.ranks_per_host}" for n in names),
            "--map-by", "slot" if self.mode == "block" else "node",
            # All the hosts share this machine's cores, which each daemon cannot see: unbound ranks
            # (each would bind its first rank to core 0) that yield when idle, as mpirun does for an
            # oversubscribed single node (busy polling without yielding is 10-100x slower here).
            "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1",
            "--mca", "plm_rsh_agent", agent_command(),
            "--mca", "oob_tcp_if_include", self.state.subnet,
            "--mca", "btl_tcp_if_include", self.state.subnet,
            *mpi_args, *command,
        ]  # fmt: skip
        return host_argv(names[0], argv)

    def describe(self) -> dict[str, Any]:
        """What the report says about where the job ran."""
        link = self.state.link
        goodput = link.expected_goodput_bps()
        return {
            "name": self.state.name,
            "hosts": self.hosts,
            "ranks_per_host": self.ranks_per_host,
            "placement": self.mode,
            "link": link.to_json(),
            "emulated": self.state.emulated,
            "link_goodput_gbps": None if goodput is None else goodput / 8e9,
            "switch": None if self.state.switch is None else self.state.switch.endpoint,
        }


def parser() -> argparse.ArgumentParser:
    p = bench_cli.parser(prog=PROG, nprocs_option=False)
    p.description = "Benchmark a collective on the emulated hosts, side by side with Gloo and OpenMPI."
    g = p.add_argument_group("placement on the testbed (ranks = hosts x ranks per host)")
    g.add_argument("--name", default=default_name(), help="testbed name (default $SHOAL_TESTBED_NAME or 'shoal')")
    g.add_argument("--hosts", type=positive_int, help="use only the first N hosts (default all)")
    g.add_argument("--ranks-per-host", type=positive_int, help="ranks per host (default the testbed's)")
    g.add_argument("--placement", choices=("block", "cyclic"), default="block", help="rank -> host mapping")
    return p


def main(argv: list[str]) -> int:
    """`shoal testbed bench ARGS`; returns the exit code (TestbedError is the caller's to report)."""
    p = parser()
    try:
        ns = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else bench_cli.EXIT_USAGE
    from shoal.testbed.cli import require_up  # (cli imports this module)

    state = require_up(ns.name)
    netns.preflight()
    hosts = ns.hosts or len(state.hosts)
    if hosts > len(state.hosts):
        raise TestbedError(f"--hosts {hosts}: testbed {state.name!r} has {len(state.hosts)} hosts", code=2)
    placement = Placement(state, hosts, ns.ranks_per_host or state.ranks_per_host, ns.placement)
    ns.nprocs = placement.nprocs
    command = f"{PROG} " + " ".join(shlex.quote(a) for a in argv)
    return bench_cli.run(ns, command, prog=PROG, testbed=placement)
