"""Network namespaces, veth pairs and the bridge, through iproute2 (`ip`, `tc`).

Nothing here touches the root namespace's interfaces: the bridge lives in its
own namespace, every veth pair is created directly between two of the
testbed's namespaces, so deleting the namespaces removes everything (links,
bridge, qdiscs) at once.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

#: Where iproute2 lives when it is not on PATH (non-root PATHs often lack the sbin directories).
_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")
INSTALL_HINT = "apt-get install -y iproute2 (Debian/Ubuntu), dnf install iproute iproute-tc (Fedora/RHEL)"


class TestbedError(Exception):
    """A failure to report to the user as is; `code` is the exit status (2: missing prerequisite)."""

    __test__ = False  # not a pytest test class

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def find_tool(name: str) -> str | None:
    """The path of `name` on PATH or in the usual sbin directories."""
    found = shutil.which(name)
    if found:
        return found
    for d in _SBIN:
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def preflight() -> None:
    """Raises TestbedError (code 2) naming what is missing: root, `ip` or `tc`."""
    missing = [t for t in ("ip", "tc") if find_tool(t) is None]
    problems = []
    if os.geteuid() != 0:
        problems.append(
            "root privileges (network namespaces, veth pairs and tc need CAP_NET_ADMIN/CAP_SYS_ADMIN): "
            "run it as root, e.g. `sudo $(which shoal) testbed ...`"
        )
    if missing:
        problems.append(f"{' and '.join(missing)} from iproute2: install it with {INSTALL_HINT}")
    if problems:
        raise TestbedError("needs " + "; and ".join(problems), code=2)


def _tool(name: str) -> str:
    path = find_tool(name)
    if path is None:
        raise TestbedError(f"`{name}` (iproute2) is missing: install it with {INSTALL_HINT}", code=2)
    return path


def run(argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Runs a command; with `check`, a failure raises TestbedError quoting the command and its stderr."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise TestbedError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {detail}")
    return proc


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip [-n ns] args...`."""
    return run([_tool("ip"), *(["-n", ns] if ns else []), *args], check=check)


def tc(ns: str, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """`tc -n ns args...`."""
    return run([_tool("tc"), "-n", ns, *args], check=check)


def exec_argv(ns: str, argv: list[str]) -> list[str]:
    """The command line running `argv` inside namespace `ns` (its environment is inherited)."""
    return [_tool("ip"), "netns", "exec", ns, *argv]


def list_namespaces() -> list[str]:
    """Names of all named network namespaces (`ip netns list`)."""
    proc = ip("netns", "list", check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def testbed_namespaces(name: str) -> list[str]:
    """The namespaces of testbed `name` that exist: NAME-h<k>, NAME-ina, NAME-sw (removal order)."""
    pattern = re.compile(rf"{re.escape(name)}-(h(\d+)|ina|sw)")
    found = [(m, ns) for ns in list_namespaces() if (m := pattern.fullmatch(ns))]
    order = {"ina": 1 << 30, "sw": 1 << 31}
    found.sort(key=lambda item: int(item[0].group(2)) if item[0].group(2) else order[item[0].group(1)])
    return [ns for _, ns in found]


def add_namespace(ns: str) -> None:
    """Creates `ns` with its loopback up and IPv6 off (no router solicitations or DAD on the shaped links)."""
    ip("netns", "add", ns)
    ip("link", "set", "lo", "up", ns=ns)
    for key in ("all", "default"):
        # Best effort: a kernel without IPv6 has no such file.
        run(exec_argv(ns, ["sh", "-c", f"echo 1 > /proc/sys/net/ipv6/conf/{key}/disable_ipv6"]), check=False)


def add_bridge(ns: str, bridge: str, mtu: int) -> None:
    """A bridge without STP (ports forward at once) in `ns`."""
    ip("link", "add", bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0", ns=ns)
    ip("link", "set", bridge, "mtu", str(mtu), "up", ns=ns)


def add_veth(ns_a: str, dev_a: str, ns_b: str, dev_b: str, mtu: int) -> None:
    """A veth pair with end `dev_a` in `ns_a` and `dev_b` in `ns_b`, both down."""
    ip("link", "add", dev_a, "netns", ns_a, "mtu", str(mtu), "type", "veth", "peer", "name", dev_b, "netns", ns_b)
    ip("link", "set", dev_b, "mtu", str(mtu), ns=ns_b)


def namespace_pids(ns: str) -> list[int]:
    """Processes running in `ns` (`ip netns pids`)."""
    proc = ip("netns", "pids", ns, check=False)
    return [int(t) for t in proc.stdout.split() if t.isdigit()]


def stop_processes(namespaces: list[str], grace: float = 3.0) -> list[int]:
    """SIGTERM to every process in `namespaces`, SIGKILL to those left after `grace`; returns their pids."""
    pids = sorted({pid for ns in namespaces for pid in namespace_pids(ns)} - {os.getpid()})
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(pid_alive(p) for p in alive):
            time.sleep(0.05)
    return pids


def pid_alive(pid: int | None) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def delete_namespace(ns: str) -> None:
    """Deletes `ns` (and with it every interface, bridge and qdisc inside); no error if it is gone."""
    proc = ip("netns", "del", ns, check=False)
    if proc.returncode != 0 and ns in list_namespaces():
        raise TestbedError(f"cannot delete namespace {ns}: {proc.stderr.strip()}")
