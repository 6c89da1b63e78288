"""`shoal testbed`: an emulated cluster of hosts (network namespaces) behind one switch (a bridge).

::

    shoal testbed up --hosts 4 --ranks-per-host 2 --link 1gbit --delay 50us [--loss 0.1%] [--switch]
    shoal testbed run [--timeout S] [--env K=V] -- python train.py
    shoal testbed status [--json]
    shoal testbed check                 # measures throughput and RTT between two hosts
    shoal testbed down

Every subcommand takes ``--name NAME`` (default ``$SHOAL_TESTBED_NAME`` or
``shoal``): testbeds of different names are independent (namespaces
``NAME-h0``..., ``NAME-sw``, ``NAME-ina``; state ``/run/shoal-testbed/NAME.json``).
See docs/testbed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from shoal.launcher import (
    EXIT_CANNOT_START,
    RankSpec,
    assignment,
    give_secret,
    launch,
    new_secret,
    positive_float,
    positive_int,
)
from shoal.testbed import netns
from shoal.testbed.netns import TestbedError
from shoal.testbed.shaping import Capabilities, Link, format_delay, format_rate, shape_commands
from shoal.testbed.state import (
    BRIDGE,
    DEFAULT_NAME,
    DEFAULT_SUBNET,
    HOST_DEV,
    MTU,
    Host,
    State,
    Switch,
    check_name,
    default_name,
    load,
    plan,
    remove,
    state_dir,
    state_path,
)

MEASURE_SCRIPT = Path(__file__).resolve().parent / "measure.py"
#: Prints a TCP port that is free in the namespace it runs in.
_FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


def _say(message: str) -> None:
    print(message, flush=True)


def _warn(message: str) -> None:
    print(f"shoal testbed: warning: {message}", file=sys.stderr, flush=True)


def _name_opt(name: str) -> str:
    return "" if name == DEFAULT_NAME else f" --name {name}"


# ---------------------------------------------------------------------------------------------- up


def probe_capabilities(ns: str, dev: str, link: Link) -> Capabilities:
    """Whether the kernel has netem (tried on `dev`, then removed); only asked when delay or loss is wanted."""
    if not (link.delay_s or link.loss):
        return Capabilities(netem=False)
    proc = netns.tc(ns, ["qdisc", "add", "dev", dev, "root", "handle", "1:", "netem"], check=False)
    if proc.returncode == 0:
        netns.tc(ns, ["qdisc", "del", "dev", dev, "root"], check=False)
        return Capabilities(netem=True)
    return Capabilities(netem=False)


def switch_daemon_available() -> bool:
    """Whether this build has the INA daemon (`shoal switch --help` succeeds)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "shoal.cli", "switch", "--help"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def start_switch_daemon(sw: Switch, name: str) -> None:
    """Starts `shoal switch --listen ADDR:9800` in the INA namespace (detached, output to a log file)."""
    log = state_dir() / f"{name}-switch.log"
    sw.log = str(log)
    threads = [] if sw.threads is None else ["--threads", str(sw.threads)]
    argv = netns.exec_argv(sw.ns, [sys.executable, "-m", "shoal.cli", "switch", "--listen", sw.endpoint, *threads])
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    time.sleep(1.0)
    code = proc.poll()
    if code is None:
        sw.daemon_pid, sw.daemon = proc.pid, "running"
    else:
        sw.daemon = f"exited with code {code} at start (see {log})"


def build(state: State) -> None:
    """Creates the namespaces, bridge, links, addresses and shaping of `state` (status stays 'creating')."""
    sw_ns, link = state.switch_ns, state.link
    netns.add_namespace(sw_ns)
    netns.add_bridge(sw_ns, BRIDGE, MTU)
    prefix = state.subnet.split("/")[1]
    caps: Capabilities | None = None
    for host in state.hosts:
        netns.add_namespace(host.ns)
        netns.add_veth(host.ns, HOST_DEV, sw_ns, host.port, MTU)
        netns.ip("link", "set", host.port, "master", BRIDGE, "up", ns=sw_ns)
        netns.ip("addr", "add", f"{host.address}/{prefix}", "dev", HOST_DEV, ns=host.ns)
        netns.ip("link", "set", HOST_DEV, "up", ns=host.ns)
        if state.no_gso:
            netns.ip("link", "set", HOST_DEV, "gso_max_segs", "1", ns=host.ns)
            netns.ip("link", "set", host.port, "gso_max_segs", "1", ns=sw_ns)
        if caps is None:
            caps = probe_capabilities(sw_ns, host.port, link)
            state.emulated = caps.emulated(link)
        # Both directions of the link: the host's egress and the switch port's egress (towards the host).
        for ns, dev in ((host.ns, HOST_DEV), (sw_ns, host.port)):
            for cmd in shape_commands(dev, link, caps):
                netns.tc(ns, cmd)
    if state.switch is not None:
        sw = state.switch
        netns.add_namespace(sw.ns)
        netns.add_veth(sw.ns, HOST_DEV, sw_ns, "ina", MTU)  # unshaped: the switch's own fat port
        netns.ip("link", "set", "ina", "master", BRIDGE, "up", ns=sw_ns)
        netns.ip("addr", "add", f"{sw.address}/{prefix}", "dev", HOST_DEV, ns=sw.ns)
        netns.ip("link", "set", HOST_DEV, "up", ns=sw.ns)
        if switch_daemon_available():
            start_switch_daemon(sw, state.name)
        else:
            sw.daemon = "not available yet (this build has no `shoal switch`)"


def up(
    name: str,
    hosts: int,
    ranks_per_host: int,
    link: Link,
    subnet: str = DEFAULT_SUBNET,
    switch: bool = False,
    strict: bool = False,
    no_gso: bool = False,
    switch_threads: int | None = None,
) -> State:
    """Brings testbed `name` up (a no-op if it is up with the same parameters); returns its state."""
    check_name(name)
    netns.preflight()
    desired = plan(name, hosts, ranks_per_host, link, subnet, switch, no_gso)
    if desired.switch is not None:
        desired.switch.threads = switch_threads
    existing = load(name)
    if existing is not None:
        present = set(netns.testbed_namespaces(name))
        wanted = set(existing.namespaces())
        if existing.status == "up" and existing.params() == desired.params() and wanted <= present:
            _say(f"testbed {name!r} is already up with these parameters (nothing to do)")
            return existing
        if existing.status != "up" or not wanted <= present:
            why = "a previous `up` did not finish or parts of it are gone"
        else:
            have = ", ".join(f"{k}={v}" for k, v in existing.params().items())
            why = f"it is up with different parameters ({have})"
        raise TestbedError(f"testbed {name!r} exists: {why}; run `shoal testbed down{_name_opt(name)}` first")
    leftovers = netns.testbed_namespaces(name)
    if leftovers:
        raise TestbedError(
            f"namespaces {', '.join(leftovers)} are left from an earlier testbed {name!r}; "
            f"run `shoal testbed down{_name_opt(name)}` first"
        )
    desired.save()
    try:
        build(desired)
        missing = {k: v for k, v in desired.emulated.items() if "NOT" in v}
        if missing and strict:
            raise TestbedError(
                "cannot emulate " + ", ".join(f"{k} ({v})" for k, v in missing.items()) + " and --strict was given",
                code=2,
            )
    except BaseException:
        _teardown(name, quiet=True)
        raise
    desired.status = "up"
    desired.save()
    return desired


# -------------------------------------------------------------------------------------------- down


def _teardown(name: str, quiet: bool = False) -> tuple[list[str], list[int], list[Path]]:
    namespaces = netns.testbed_namespaces(name)
    pids = netns.stop_processes(namespaces)
    for ns in namespaces:
        netns.delete_namespace(ns)
    removed = remove(name)
    return namespaces, pids, removed


def down(name: str) -> int:
    """Removes everything testbed `name` made (processes in its namespaces, namespaces, state); 0 on success."""
    check_name(name)
    netns.preflight()
    namespaces, pids, removed = _teardown(name)
    if not namespaces and not removed:
        _say(f"testbed {name!r}: nothing to remove")
        return 0
    if pids:
        _say(f"stopped {len(pids)} process(es) still running in the testbed: {' '.join(map(str, pids))}")
    if namespaces:
        _say(f"removed namespaces {', '.join(namespaces)} (with their links, bridge and qdiscs)")
    for path in removed:
        _say(f"removed {path}")
    left = netns.testbed_namespaces(name)
    if left:
        raise TestbedError(f"namespaces {', '.join(left)} are still there")
    return 0


# ------------------------------------------------------------------------------------------ status


def describe(state: State) -> str:
    """A human summary of the testbed."""
    link = state.link
    lines = [
        f"testbed {state.name!r}: {state.status}, {len(state.hosts)} hosts x {state.ranks_per_host} ranks, "
        f"subnet {state.subnet}, MTU {state.mtu}" + (", no GSO" if state.no_gso else ""),
        f"  links (each host <-> switch, both directions): rate {format_rate(link.rate_bps)}, "
        f"delay {format_delay(link.delay_s)} one way per link"
        + (f", loss {link.loss * 100:g}% per link direction" if link.loss else ""),
        f"  host-to-host: one-way delay {format_delay(2 * link.delay_s)}, RTT {format_delay(4 * link.delay_s)}",
        "  emulation: " + ", ".join(f"{k} {v}" for k, v in state.emulated.items()),
        f"  switch: bridge {BRIDGE} in namespace {state.switch_ns}",
    ]
    rph = state.ranks_per_host
    for h in state.hosts:
        ranks = f"{h.index * rph}" if rph == 1 else f"{h.index * rph}-{h.index * rph + rph - 1}"
        lines.append(f"  {h.ns:<16} {h.address:<15} port {h.port:<5} ranks {ranks} (block placement)")
    if state.switch is not None:
        sw = state.switch
        lines.append(f"  {sw.ns:<16} {sw.address:<15} INA daemon at {sw.endpoint}: {sw.daemon}")
    return "\n".join(lines)


def status(name: str, as_json: bool = False) -> int:
    """Prints the testbed's state and whether its namespaces (and daemon) are still there; 1 if it is not up."""
    check_name(name)
    state = load(name)
    present = netns.testbed_namespaces(name) if netns.find_tool("ip") else []
    if state is None:
        msg = f"no testbed named {name!r} is up"
        if present:
            msg += f" (but namespaces {', '.join(present)} exist: `shoal testbed down{_name_opt(name)}` removes them)"
        if as_json:
            print(json.dumps({"name": name, "status": "down", "namespaces": present}))
        else:
            _say(msg)
        return 1
    if state.switch is not None and state.switch.daemon == "running" and not netns.pid_alive(state.switch.daemon_pid):
        state.switch.daemon = f"exited (pid {state.switch.daemon_pid} is gone; see {state.switch.log})"
    missing = [ns for ns in state.namespaces() if ns not in present]
    if as_json:
        print(json.dumps({**state.to_json(), "missing_namespaces": missing, "state_file": str(state_path(name))}))
    else:
        _say(describe(state))
        _say(f"  state: {state_path(name)}")
        if missing:
            _say(f"  MISSING namespaces: {', '.join(missing)} (run `shoal testbed down{_name_opt(name)}` and up again)")
    return 0 if state.status == "up" and not missing else 1


# --------------------------------------------------------------------------------------------- run


def require_up(name: str) -> State:
    state = load(name)
    if state is None or state.status != "up":
        raise TestbedError(f"no testbed named {name!r} is up: run `shoal testbed up{_name_opt(name)} ...` first")
    return state


def free_port_in(ns: str) -> int:
    """A TCP port that is free inside namespace `ns` right now."""
    proc = netns.run(netns.exec_argv(ns, [sys.executable, "-c", _FREE_PORT]))
    return int(proc.stdout.strip())


def placement(hosts: int, ranks_per_host: int, mode: str = "block") -> list[tuple[int, int]]:
    """(host, local rank) of each rank. block: ranks 0..R-1 on host 0, ...; cyclic: rank r on host r % hosts."""
    world = hosts * ranks_per_host
    if mode == "block":
        return [(r // ranks_per_host, r % ranks_per_host) for r in range(world)]
    if mode == "cyclic":
        return [(r % hosts, r // hosts) for r in range(world)]
    raise ValueError(f"unknown placement {mode!r} (block or cyclic)")


def rank_specs(
    state: State,
    command: list[str],
    *,
    hosts: int | None = None,
    ranks_per_host: int | None = None,
    mode: str = "block",
    master_port: int | None = None,
    extra_env: dict[str, str] | None = None,
    job_id: str | None = None,
) -> list[RankSpec]:
    """How to start each rank: `command` inside its host's namespace with the rank environment."""
    used: list[Host] = state.hosts[: hosts or len(state.hosts)]
    rph = ranks_per_host or state.ranks_per_host
    where = placement(len(used), rph, mode)
    master = used[0]
    port = master_port or free_port_in(master.ns)
    job_id = job_id or uuid.uuid4().hex
    secret = new_secret()
    specs = []
    for rank, (h, local) in enumerate(where):
        host = used[h]
        env = dict(os.environ)
        give_secret(env, secret)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(len(where)),
            LOCAL_RANK=str(local),
            LOCAL_WORLD_SIZE=str(rph),
            GROUP_RANK=str(h),
            MASTER_ADDR=master.address,
            MASTER_PORT=str(port),
            SHOAL_HOST_ID=host.ns,
            SHOAL_TCP_ADDR=host.address,
            SHOAL_JOB_ID=job_id,
            SHOAL_TESTBED=state.name,
            PYTHONUNBUFFERED="1",
        )
        if state.switch is not None:
            env["SHOAL_SWITCH"] = state.switch.trees
        env.update(extra_env or {})
        specs.append(RankSpec(netns.exec_argv(host.ns, command), env))
    return specs


def run(name: str, ns: argparse.Namespace) -> int:
    state = require_up(name)
    netns.preflight()
    if shutil.which(ns.command[0]) is None:  # the namespaces share our file system
        print(f"shoal testbed run: cannot start {ns.command[0]!r}: no such program", file=sys.stderr, flush=True)
        return EXIT_CANNOT_START
    if ns.hosts is not None and ns.hosts > len(state.hosts):
        raise TestbedError(f"--hosts {ns.hosts}: the testbed has {len(state.hosts)} hosts", code=2)
    sw = state.switch
    if sw is not None and not (sw.daemon == "running" and netns.pid_alive(sw.daemon_pid)):
        _warn(f"no INA daemon is running in {sw.ns} ({sw.daemon}); SHOAL_SWITCH={sw.endpoint} is set anyway")
    specs = rank_specs(
        state,
        ns.command,
        hosts=ns.hosts,
        ranks_per_host=ns.ranks_per_host,
        mode=ns.placement,
        master_port=ns.master_port,
        extra_env=dict(ns.env),
    )
    return launch(
        specs, prefix=not ns.no_prefix, timeout=ns.timeout, name="shoal testbed run", command_name=ns.command[0]
    )


# ------------------------------------------------------------------------------------------- check


def measure(state: State, src: int, dst: int, nbytes: int | None = None, pings: int = 200) -> dict[str, object]:
    """Throughput and RTT from host `src` to host `dst`, measured by measure.py in their namespaces."""
    a, b = state.hosts[src], state.hosts[dst]
    if nbytes is None:
        rate = state.link.rate_bps or 8 * (48 << 20)
        nbytes = int(min(48 << 20, max(1 << 20, rate / 8)))  # about a second at the link rate, at most 48 MiB
    port = free_port_in(b.ns)
    server = subprocess.Popen(
        netns.exec_argv(b.ns, [sys.executable, str(MEASURE_SCRIPT), "serve", b.address, str(port)]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 20)
        if not ready or server.stdout.readline().strip() != "ready":
            raise TestbedError(f"the receiver in {b.ns} did not start: {server.stderr.read() if server.stderr else ''}")
        client = netns.run(
            netns.exec_argv(
                a.ns,
                [sys.executable, str(MEASURE_SCRIPT), "probe", b.address, str(port)]
                + ["--bytes", str(nbytes), "--pings", str(pings), "--seconds", "10"],
            ),
            timeout=60,
        )
    finally:
        server.kill()
        server.wait()
    result: dict[str, object] = json.loads(client.stdout)
    result.update(src=a.ns, dst=b.ns)
    return result


def check(name: str, src: int, dst: int, nbytes: int | None, as_json: bool) -> int:
    """Measures src -> dst and compares with the configured link; 0 if everything emulated is in tolerance."""
    state = require_up(name)
    netns.preflight()
    if len(state.hosts) < 2 or not (0 <= src < len(state.hosts) and 0 <= dst < len(state.hosts)) or src == dst:
        raise TestbedError(f"check needs two different hosts among 0..{len(state.hosts) - 1}", code=2)
    r = measure(state, src, dst, nbytes)
    link = state.link
    goodput = float(r["goodput_bps"])  # type: ignore[arg-type]
    rtt = r["rtt_us"]
    assert isinstance(rtt, dict)
    verdicts = {}
    expected = link.expected_goodput_bps()
    if expected is not None:
        verdicts["rate"] = 0.85 * expected <= goodput <= 1.05 * expected
    if link.delay_s and "NOT" not in state.emulated.get("delay", ""):
        want_us = 4 * link.delay_s * 1e6
        verdicts["delay"] = 0.9 * want_us <= rtt["min"] and rtt["median"] <= want_us * 1.25 + 500
    r["expected_goodput_bps"], r["expected_rtt_us"], r["ok"] = expected, 4 * link.delay_s * 1e6, verdicts
    if as_json:
        print(json.dumps(r))
    else:
        exp = f"{expected / 1e6:.1f}" if expected else "-"
        mark: dict[bool | None, str] = {True: "ok", False: "OFF"}
        _say(f"{r['src']} -> {r['dst']} ({link.describe()})")
        _say(
            f"  throughput {goodput / 1e6:8.1f} Mbit/s   expected <= {exp} Mbit/s "
            f"(the rate less Ethernet/IP/TCP framing)  {mark.get(verdicts.get('rate'), '')}"
        )
        delay_note = state.emulated.get("delay", "")
        _say(
            f"  RTT min {rtt['min']:.0f} us, median {rtt['median']:.0f} us, p90 {rtt['p90']:.0f} us   "
            f"expected 4 x delay = {4 * link.delay_s * 1e6:.0f} us + the stack's own "
            f"{'(' + delay_note + ')' if 'NOT' in delay_note else ''}  {mark.get(verdicts.get('delay'), '')}"
        )
    return 0 if all(verdicts.values()) else 1


# -------------------------------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--name",
        default=default_name(),
        help="testbed name, prefix of its namespaces (default $SHOAL_TESTBED_NAME or 'shoal')",
    )
    p = argparse.ArgumentParser(
        prog="shoal testbed", description="An emulated cluster: hosts as network namespaces behind a shaped switch."
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{up,run,bench,status,check,down}")
    u = sub.add_parser("up", parents=[common], help="create the hosts, switch and shaped links")
    u.add_argument("--hosts", type=positive_int, default=2, help="number of hosts (default 2)")
    u.add_argument("--ranks-per-host", type=positive_int, default=1, help="ranks `run` starts per host (default 1)")
    u.add_argument("--link", default="1gbit", help="rate of each host link, tc units, or 'unlimited' (default 1gbit)")
    u.add_argument("--delay", default="0", help="one-way delay of each host link, e.g. 50us (default 0)")
    u.add_argument("--loss", default="0", help="packet loss of each link direction, e.g. 0.1%% (default 0)")
    u.add_argument("--switch", action="store_true", help="add the INA namespace NAME-ina (and start `shoal switch`)")
    u.add_argument(
        "--switch-threads",
        type=positive_int,
        help="data-plane threads of `shoal switch` (its --threads; default: the number of cores)",
    )
    u.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"private subnet of the hosts (default {DEFAULT_SUBNET})")
    u.add_argument("--strict", action="store_true", help="fail instead of warning if a parameter cannot be emulated")
    u.add_argument(
        "--no-gso",
        action="store_true",
        help="no segmentation offload on the links: every packet one frame (per-frame loss; costs much CPU)",
    )
    r = sub.add_parser("run", parents=[common], help="run a command on every rank, inside the host namespaces")
    r.add_argument("--hosts", type=positive_int, help="use only the first N hosts")
    r.add_argument("--ranks-per-host", type=positive_int, help="override the testbed's ranks per host")
    r.add_argument("--placement", choices=("block", "cyclic"), default="block", help="rank -> host mapping")
    r.add_argument("--master-port", type=positive_int, help="store port of rank 0 (default: a free port)")
    r.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with [rank]: ")
    r.add_argument("--timeout", type=positive_float, help="stop all ranks after this many seconds (exit 124)")
    r.add_argument("--env", type=assignment, action="append", default=[], metavar="K=V", help="extra variable")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command (after an optional --)")
    # (bench has its own parser, shoal bench's: main hands it the arguments before this one parses them)
    sub.add_parser("bench", help="shoal bench on the emulated hosts (shoal testbed bench -h)", add_help=False)
    s = sub.add_parser("status", parents=[common], help="show the testbed")
    s.add_argument("--json", action="store_true", help="print the state as JSON")
    c = sub.add_parser("check", parents=[common], help="measure throughput and RTT between two hosts")
    c.add_argument("--src", type=int, default=0, help="sending host (default 0)")
    c.add_argument("--dst", type=int, default=1, help="receiving host (default 1)")
    c.add_argument("--bytes", type=positive_int, help="bytes of the bulk transfer (default: ~1 s at the rate)")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    sub.add_parser("down", parents=[common], help="remove everything `up` made")
    return p


def main(argv: list[str]) -> int:
    """Runs `shoal testbed` with `argv` (the arguments after `testbed`); returns the exit code."""
    if argv[:1] == ["bench"]:
        from shoal.testbed.bench import main as bench_main

        return _reporting_errors(lambda: bench_main(argv[1:]))
    p = parser()
    try:
        ns = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    return _reporting_errors(lambda: _dispatch(ns))


def _reporting_errors(action: Callable[[], int]) -> int:
    """Runs a subcommand; a TestbedError or ^C becomes a message and an exit code."""
    try:
        return action()
    except TestbedError as e:
        print(f"shoal testbed: {e}", file=sys.stderr, flush=True)
        return e.code
    except KeyboardInterrupt:
        print("shoal testbed: interrupted", file=sys.stderr, flush=True)
        return 130


def _dispatch(ns: argparse.Namespace) -> int:
    check_name(ns.name)
    if ns.cmd == "up":
        try:
            link = Link.parse(ns.link, ns.delay, ns.loss)
        except ValueError as e:
            raise TestbedError(str(e), code=2) from None
        state = up(
            ns.name, ns.hosts, ns.ranks_per_host, link, ns.subnet, ns.switch, ns.strict, ns.no_gso, ns.switch_threads
        )
        _say(describe(state))
        for k, v in state.emulated.items():
            if "NOT" in v:
                _warn(f"{k} is {v}: the links have the rate but not this {k}")
        return 0
    if ns.cmd == "down":
        return down(ns.name)
    if ns.cmd == "status":
        return status(ns.name, ns.json)
    if ns.cmd == "check":
        return check(ns.name, ns.src, ns.dst, ns.bytes, ns.json)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        raise TestbedError("no command given (usage: shoal testbed run [options] -- cmd args...)", code=2)
    ns.command = command
    return run(ns.name, ns)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
