"""OpenMPI's remote-shell agent on the testbed: "ssh" into an emulated host.

``mpirun --mca plm_rsh_agent "python -m shoal.testbed.mpi_agent"`` starts its
daemons as ``AGENT HOST WORDS...``, as it would with ssh. Here HOST is a
host's namespace name (``NAME-hK``, the names the hostfile lists) and the
words are run by ``sh -c`` inside that namespace, in a UTS namespace of its
own whose hostname is HOST. The hostname matters: OpenMPI names its
shared-memory segments after it, so two "hosts" reporting the machine's one
hostname would unlink each other's segments; and ranks on one emulated host
then see each other as local (shared memory) and ranks elsewhere as remote
(TCP over the shaped links), like shoal's ranks do.

``python -m shoal.testbed.mpi_agent --as-host HOST -- ARGV...`` is the inner
step (after ``ip netns exec HOST unshare --uts``): set the hostname, exec ARGV.
It is also how ``shoal testbed bench`` starts mpirun itself on host 0.
"""

from __future__ import annotations

import os
import socket
import sys

from shoal.testbed import netns

#: this module, as `python -m` names it (__name__ is "__main__" when it runs as the agent)
MODULE = "shoal.testbed.mpi_agent"


def host_argv(host: str, argv: list[str]) -> list[str]:
    """argv that runs `argv` on emulated host `host`: its network namespace, hostname `host`."""
    unshare = netns.find_tool("unshare") or "unshare"
    return netns.exec_argv(host, [unshare, "--uts", "--", sys.executable, "-m", MODULE, "--as-host", host, "--", *argv])


def agent_command() -> str:
    """The value of OpenMPI's plm_rsh_agent that selects this agent."""
    return f"{sys.executable} -m {MODULE}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--as-host"] and len(argv) >= 4 and argv[2] == "--":
        socket.sethostname(argv[1])
        os.execvp(argv[3], argv[3:])
    if len(argv) < 2 or argv[0].startswith("-"):
        print("usage: python -m shoal.testbed.mpi_agent HOST COMMAND WORDS...  (OpenMPI's rsh agent)", file=sys.stderr)
        return 2
    host, words = argv[0], argv[1:]
    if host not in netns.list_namespaces():
        print(f"shoal testbed mpi agent: no emulated host (network namespace) named {host!r}", file=sys.stderr)
        return 255  # what ssh returns when it cannot reach the host
    # Like ssh: the remote side gets one command line, parsed by its shell.
    cmd = host_argv(host, ["sh", "-c", " ".join(words)])
    os.execvp(cmd[0], cmd)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
