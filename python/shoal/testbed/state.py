"""The testbed's state file: what `up` made, read by `run`, `status`, `check` and `down`.

One JSON file per testbed name, ``$SHOAL_TESTBED_DIR/<name>.json`` (default
directory ``/run/shoal-testbed``, a tmpfs: the namespaces do not survive a
reboot either). `up` writes it with ``"status": "creating"`` before it makes
anything and ``"up"`` once everything is in place.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shoal.testbed.netns import TestbedError
from shoal.testbed.shaping import Link

DEFAULT_DIR = "/run/shoal-testbed"
DEFAULT_NAME = "shoal"
DEFAULT_SUBNET = "10.77.0.0/24"
#: The port the INA switch daemon listens on.
SWITCH_PORT = 9800
MTU = 1500
#: Names of the switch-side objects.
BRIDGE = "br0"
#: The interface name of a host's link inside its own namespace.
HOST_DEV = "eth0"

_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,39}")


def check_name(name: str) -> str:
    """Testbed names prefix every namespace: lower-case letters, digits and '-', at most 40."""
    if not _NAME_RE.fullmatch(name) or name.endswith("-"):
        raise TestbedError(f"bad testbed name {name!r}: use lower-case letters, digits and '-' (e.g. shoal)", code=2)
    return name


def check_subnet(text: str) -> ipaddress.IPv4Network:
    """A private IPv4 subnet with room for the hosts; nothing routable, loopback or link-local."""
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError as e:
        raise TestbedError(f"bad subnet {text!r}: {e}", code=2) from None
    if not net.is_private or net.is_loopback or net.is_link_local or net.prefixlen > 29:
        raise TestbedError(
            f"subnet {text} must be a private IPv4 range (10/8, 172.16/12, 192.168/16) of at most /29", code=2
        )
    return net


def default_name() -> str:
    """The testbed name commands use without --name: $SHOAL_TESTBED_NAME, else 'shoal'."""
    return os.environ.get("SHOAL_TESTBED_NAME", DEFAULT_NAME)


def state_dir() -> Path:
    return Path(os.environ.get("SHOAL_TESTBED_DIR", DEFAULT_DIR))


def state_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


@dataclass
class Host:
    """One emulated host: namespace `ns` with interface eth0 at `address`, linked to bridge port `port`."""

    index: int
    ns: str
    address: str
    port: str


@dataclass
class Switch:
    """The INA namespace on the bridge, and the daemon started there (if the build has one)."""

    ns: str
    address: str
    port: int = SWITCH_PORT
    daemon_pid: int | None = None
    daemon: str = "not started"
    log: str | None = None
    # `shoal switch --threads` (None: its default, one per core).
    threads: int | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def trees(self) -> str:
        """SHOAL_SWITCH for the ranks: the switch once per data-plane thread, so that one job's trees (switch
        jobs) are spread over all of them (a job with one tree would use one thread)."""
        threads = self.threads if self.threads is not None else len(os.sched_getaffinity(0))
        return ",".join([self.endpoint] * max(threads, 1))


@dataclass
class State:
    name: str
    subnet: str
    ranks_per_host: int
    link: Link
    hosts: list[Host]
    switch_ns: str
    switch: Switch | None = None
    status: str = "creating"
    emulated: dict[str, str] = field(default_factory=dict)
    mtu: int = MTU
    #: Segmentation offload off (gso_max_segs 1): every packet is one frame, at a CPU cost.
    no_gso: bool = False

    def namespaces(self) -> list[str]:
        """Every namespace of the testbed: hosts, the INA namespace if any, the switch."""
        return [h.ns for h in self.hosts] + ([self.switch.ns] if self.switch else []) + [self.switch_ns]

    def params(self) -> dict[str, Any]:
        """What `up` was asked for: same params, same testbed (idempotent `up`)."""
        return {
            "hosts": len(self.hosts),
            "ranks_per_host": self.ranks_per_host,
            "link": self.link.describe(),
            "subnet": self.subnet,
            "switch": self.switch is not None,
            "no_gso": self.no_gso,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "subnet": self.subnet,
            "mtu": self.mtu,
            "no_gso": self.no_gso,
            "ranks_per_host": self.ranks_per_host,
            "link": self.link.to_json(),
            "emulated": self.emulated,
            "switch_namespace": self.switch_ns,
            "hosts": [asdict(h) for h in self.hosts],
            "switch": None if self.switch is None else {**asdict(self.switch), "endpoint": self.switch.endpoint},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> State:
        sw = data.get("switch")
        if sw is not None:
            sw = {k: v for k, v in sw.items() if k != "endpoint"}
        return cls(
            name=data["name"],
            subnet=data["subnet"],
            ranks_per_host=int(data["ranks_per_host"]),
            link=Link.from_json(data["link"]),
            hosts=[Host(**h) for h in data["hosts"]],
            switch_ns=data["switch_namespace"],
            switch=None if sw is None else Switch(**sw),
            status=data.get("status", "creating"),
            emulated=dict(data.get("emulated", {})),
            mtu=int(data.get("mtu", MTU)),
            no_gso=bool(data.get("no_gso", False)),
        )

    def save(self) -> None:
        path = state_path(self.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(path)


def plan(
    name: str, hosts: int, ranks_per_host: int, link: Link, subnet: str, switch: bool, no_gso: bool = False
) -> State:
    """The testbed `up` would build: names and addresses, nothing created yet."""
    net = check_subnet(subnet)
    addrs = list(net.hosts())
    # hosts take .1, .2, ...; the INA namespace the last usable address.
    if hosts + 1 > len(addrs):
        raise TestbedError(f"subnet {subnet} has room for {len(addrs) - 1} hosts, not {hosts}", code=2)
    host_list = [Host(k, f"{name}-h{k}", str(addrs[k]), f"h{k}") for k in range(hosts)]
    sw = Switch(f"{name}-ina", str(addrs[-1])) if switch else None
    return State(name, str(net), ranks_per_host, link, host_list, f"{name}-sw", sw, no_gso=no_gso)


def load(name: str) -> State | None:
    """The state of testbed `name`, or None if there is none (or it is unreadable: reported)."""
    path = state_path(name)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise TestbedError(f"cannot read {path}: {e}; `shoal testbed down` removes it") from None
    try:
        return State.from_json(data)
    except (KeyError, TypeError, ValueError) as e:
        raise TestbedError(f"{path} is not a testbed state ({e}); `shoal testbed down` removes it") from None


def remove(name: str) -> list[Path]:
    """Deletes the state file of `name` (and its switch log); returns what was removed."""
    removed = []
    for path in (state_path(name), state_dir() / f"{name}-switch.log", state_path(name).with_suffix(".tmp")):
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed
