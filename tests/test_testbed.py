"""Tests of `shoal testbed` (python/shoal/testbed): the emulated cluster.

The parsing and `tc` command tests run anywhere. The rest bring up real
testbeds (network namespaces, veth pairs, a bridge, tc shaping) and need
root and iproute2; they are skipped, with the reason, when either is
missing or when network namespaces cannot be created here. Each run uses
its own testbed name (``shoal-t<pid>``), so a crashed run cannot break the
next one, and always tears down in a ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shoal.testbed import netns, shaping
from shoal.testbed import state as tb_state

HERE = Path(__file__).parent
WORKER = HERE / "workers" / "testbed_collectives.py"
NAME = f"shoal-t{os.getpid()}"
HOSTS, RPH = 3, 2
UP_ARGS = ("--name", NAME, "--hosts", str(HOSTS), "--ranks-per-host", str(RPH), "--link", "200mbit", "--delay", "1ms")


def _why_no_netns() -> str | None:
    """Why real testbeds cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, tc)"
    if netns.find_tool("ip") is None or netns.find_tool("tc") is None:
        return "needs iproute2 (ip, tc)"
    probe = f"shoal-probe{os.getpid()}"
    proc = subprocess.run([netns.find_tool("ip") or "ip", "netns", "add", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"cannot create network namespaces here: {proc.stderr.strip()}"
    subprocess.run([netns.find_tool("ip") or "ip", "netns", "del", probe], capture_output=True)
    return None


NO_NETNS = _why_no_netns()
needs_netns = pytest.mark.skipif(NO_NETNS is not None, reason=NO_NETNS or "")


def tbcli(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shoal.cli", "testbed", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def ours(name: str) -> list[str]:
    return [ns for ns in netns.list_namespaces() if ns.startswith(f"{name}-")]


# ------------------------------------------------------------------------------- anywhere


def test_parse_link_parameters():
    assert shaping.parse_rate("1gbit") == 10**9
    assert shaping.parse_rate("200mbit") == 200 * 10**6
    assert shaping.parse_rate("1.5Gbit") == 1_500_000_000
    assert shaping.parse_rate("10mbps") == 80 * 10**6  # tc: bps = bytes per second
    assert shaping.parse_rate("unlimited") is None
    assert shaping.parse_delay("50us") == pytest.approx(50e-6)
    assert shaping.parse_delay("1ms") == pytest.approx(1e-3)
    assert shaping.parse_delay("2") == pytest.approx(2e-3)  # bare number: ms, as in netem
    assert shaping.parse_delay("0") == 0
    assert shaping.parse_loss("0.1%") == pytest.approx(0.001)
    assert shaping.parse_loss("2") == pytest.approx(0.02)
    for bad in ("fast", "1gbits", "-1mbit"):
        with pytest.raises(ValueError):
            shaping.parse_rate(bad)
    with pytest.raises(ValueError):
        shaping.parse_delay("soon")
    with pytest.raises(ValueError):
        shaping.parse_loss("100%")
    assert shaping.format_rate(10**9) == "1gbit" and shaping.format_delay(50e-6) == "50us"
    link = shaping.Link.parse("1gbit", "50us", "0.1%")
    assert shaping.Link.from_json(link.to_json()) == link
    assert link.expected_goodput_bps() == pytest.approx(10**9 * 1448 / 1514)


def test_tc_commands():
    link = shaping.Link.parse("1gbit", "50us", "0.1%")
    with_netem = shaping.shape_commands("eth0", link, shaping.Capabilities(netem=True))
    assert with_netem[0] == ["qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"]
    assert with_netem[1][:8] == ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1"]
    assert "1000000000bit" in with_netem[1]
    netem = with_netem[2]
    assert netem[netem.index("netem") :] == ["netem", "limit", "1000", "delay", "50us", "loss", "0.1%"]
    # Without netem: the rate, and the loss through a cBPF filter into a dropping class; no delay.
    no_netem = shaping.shape_commands("eth0", link, shaping.Capabilities(netem=False))
    flat = [" ".join(c) for c in no_netem]
    assert not any("netem" in c for c in flat)
    assert any("pfifo limit 0" in c for c in flat)
    assert any(c.startswith("filter add dev eth0 parent 1: protocol ip") for c in flat)
    assert shaping.shape_commands("eth0", shaping.Link.parse("unlimited"), shaping.Capabilities(False)) == []
    # The cBPF program: ld rand; A >= threshold -> no match (keep), else class 1:2.
    prog = shaping.cbpf_loss_program(0.25)
    assert prog == f"4,32 0 0 {2**32 - 4040},53 0 1 {2**30},6 0 0 0,6 0 0 65538"
    emulated = shaping.Capabilities(netem=False).emulated(link)
    assert emulated["rate"] == "htb" and "NOT" in emulated["delay"] and emulated["loss"] == "cbpf random drop"


def test_plan_names_and_addresses():
    st = tb_state.plan("tb", 4, 2, shaping.Link.parse("1gbit"), "10.77.0.0/24", switch=True)
    assert [h.ns for h in st.hosts] == ["tb-h0", "tb-h1", "tb-h2", "tb-h3"]
    assert [h.address for h in st.hosts] == ["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"]
    assert st.switch is not None and st.switch.endpoint == "10.77.0.254:9800"
    st.switch.threads = 3  # `up --switch-threads 3`: the ranks name the switch once per thread (one tree each)
    assert st.switch.trees == "10.77.0.254:9800,10.77.0.254:9800,10.77.0.254:9800"
    assert st.switch_ns == "tb-sw"
    assert tb_state.State.from_json(json.loads(json.dumps(st.to_json()))).to_json() == st.to_json()
    for bad in ("8.8.8.0/24", "127.0.0.0/8", "10.0.0.0/30", "nonsense"):
        with pytest.raises(netns.TestbedError):
            tb_state.plan("tb", 2, 1, shaping.Link.parse("1gbit"), bad, switch=False)
    with pytest.raises(netns.TestbedError):
        tb_state.check_name("Bad_Name")


def test_placement():
    from shoal.testbed.cli import placement

    assert placement(2, 2) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert placement(2, 2, "cyclic") == [(0, 0), (1, 0), (0, 1), (1, 1)]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_bench_placement_commands():
    """How `shoal testbed bench` starts each library's ranks on the hosts."""
    from shoal.testbed.bench import Placement

    st = tb_state.plan("tb", 3, 2, shaping.Link.parse("1gbit"), "10.77.0.0/24", switch=False)
    p = Placement(st, hosts=2, ranks_per_host=2)
    assert p.nprocs == 4 and p.shape() == "2x2" and p.host_names() == ["tb-h0", "tb-h1"]
    run = p.run_argv(["python", "w.py"])
    assert run[run.index("run") :] == [
        "run", "--name", "tb", "--hosts", "2", "--ranks-per-host", "2", "--placement", "block", "--no-prefix",
        "--", "python", "w.py",
    ]  # fmt: skip
    mpi = p.mpirun_argv(["--mca", "x", "y"], ["python", "w.py"])
    assert mpi[:4] == [netns.find_tool("ip") or "ip", "netns", "exec", "tb-h0"]  # mpirun itself on host 0
    inner = mpi[mpi.index("mpirun") :]
    assert inner[inner.index("-H") + 1] == "tb-h0:2,tb-h1:2" and inner[inner.index("--map-by") + 1] == "slot"
    assert inner[inner.index("--bind-to") + 1] == "none" and inner[-5:] == ["--mca", "x", "y", "python", "w.py"]
    assert "shoal.testbed.mpi_agent" in inner[inner.index("plm_rsh_agent") + 1]
    assert "10.77.0.0/24" in inner
    cyclic = Placement(st, hosts=3, ranks_per_host=1, mode="cyclic").mpirun_argv([], ["x"])
    assert cyclic[cyclic.index("--map-by") + 1] == "node"


def test_mpi_agent_refuses_unknown_hosts():
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.testbed.mpi_agent", "no-such-host-h0", "true"], capture_output=True, text=True
    )
    assert proc.returncode in (255, 2), proc.stderr
    usage = subprocess.run([sys.executable, "-m", "shoal.testbed.mpi_agent"], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_missing_root_or_iproute2_is_exit_2(monkeypatch: pytest.MonkeyPatch):
    from shoal.testbed import cli

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns, "find_tool", lambda name: None)
    monkeypatch.setenv("SHOAL_TESTBED_DIR", "/nonexistent-shoal-testbed")
    code, text = _stderr_of(cli.main, ["up", "--hosts", "2"])
    assert code == 2 and "root" in text and "iproute2" in text and "apt-get install -y iproute2" in text
    code, text = _stderr_of(cli.main, ["down"])
    assert code == 2 and "root" in text


def _stderr_of(fn, args: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        code = fn(args)
    return code, buf.getvalue()


# --------------------------------------------------------------------------- real testbeds


@pytest.fixture(scope="module")
def bed() -> Iterator[dict[str, object]]:
    """A 3-host x 2-rank testbed at 200mbit, 1ms per link, torn down (and checked gone) at the end."""
    if NO_NETNS is not None:
        pytest.skip(NO_NETNS)
    tbcli("down", "--name", NAME)  # a leftover of a crashed run with this pid
    try:
        proc = tbcli("up", *UP_ARGS)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        st = tbcli("status", "--name", NAME, "--json")
        assert st.returncode == 0, st.stdout + st.stderr
        yield json.loads(st.stdout)
    finally:
        down = tbcli("down", "--name", NAME)
        assert down.returncode == 0, down.stdout + down.stderr
        assert ours(NAME) == []
        assert not tb_state.state_path(NAME).exists()


@needs_netns
def test_up_builds_the_topology(bed: dict[str, object]):
    assert bed["status"] == "up" and bed["missing_namespaces"] == []
    hosts = bed["hosts"]
    assert isinstance(hosts, list) and [h["ns"] for h in hosts] == [f"{NAME}-h{k}" for k in range(HOSTS)]
    assert sorted(ours(NAME)) == sorted([f"{NAME}-h{k}" for k in range(HOSTS)] + [f"{NAME}-sw"])
    sw = f"{NAME}-sw"
    for h in hosts:
        addr = netns.ip("-4", "-o", "addr", "show", "dev", "eth0", ns=h["ns"]).stdout
        assert f"{h['address']}/24" in addr
        assert "mtu 1500" in netns.ip("link", "show", "eth0", ns=h["ns"]).stdout
        port = netns.ip("link", "show", h["port"], ns=sw).stdout
        assert "master br0" in port and "mtu 1500" in port
        for ns, dev in ((h["ns"], "eth0"), (sw, h["port"])):  # shaped in both directions
            classes = netns.tc(ns, ["class", "show", "dev", dev]).stdout
            assert "rate 200Mbit" in classes, classes
    # Nothing of the testbed is in the root namespace: no veth end there peers into its namespaces.
    assert f"link-netns {NAME}-" not in netns.ip("link", "show").stdout


@needs_netns
def test_up_is_idempotent_and_refuses_other_parameters(bed: dict[str, object]):
    same = tbcli("up", "--name", NAME, "--hosts", str(HOSTS), "--ranks-per-host", str(RPH), "--link", "200mbit")
    # same hosts and rate but no delay: different parameters
    assert same.returncode == 1 and "down" in same.stderr
    again = tbcli("up", *UP_ARGS)
    assert again.returncode == 0 and "already up" in again.stdout, again.stderr


@needs_netns
def test_shaping_matches_the_link(bed: dict[str, object]):
    proc = tbcli("check", "--name", NAME, "--src", "0", "--dst", "2", "--json", timeout=120)
    result = json.loads(proc.stdout)
    expected = 200e6 * 1448 / 1514
    assert 0.85 * expected <= result["goodput_bps"] <= 1.05 * expected, result
    emulated = bed["emulated"]
    assert isinstance(emulated, dict)
    if "NOT" not in emulated["delay"]:
        # 1 ms per link and direction: a host-to-host round trip crosses four shaped egresses.
        assert 3600 <= result["rtt_us"]["min"] and result["rtt_us"]["median"] <= 6000, result
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_netns
def test_run_environment_and_failure(bed: dict[str, object]):
    code = (
        "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
        "['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', "
        "'SHOAL_HOST_ID', 'SHOAL_TCP_ADDR', 'SHOAL_JOB_ID', 'SHOAL_SWITCH', 'EXTRA']}))"
    )
    proc = tbcli("run", "--name", NAME, "--env", "EXTRA=1", "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    envs = {}
    for line in proc.stdout.splitlines():
        rank, _, text = line[1:].partition("]: ")
        envs[int(rank)] = json.loads(text)
    hosts = bed["hosts"]
    assert isinstance(hosts, list) and sorted(envs) == list(range(HOSTS * RPH))
    for r, env in envs.items():
        h = hosts[r // RPH]
        assert env["RANK"] == str(r) and env["WORLD_SIZE"] == str(HOSTS * RPH)
        assert env["LOCAL_RANK"] == str(r % RPH) and env["LOCAL_WORLD_SIZE"] == str(RPH)
        assert env["SHOAL_HOST_ID"] == h["ns"] and env["SHOAL_TCP_ADDR"] == h["address"]
        assert env["MASTER_ADDR"] == hosts[0]["address"] and env["EXTRA"] == "1" and env["SHOAL_SWITCH"] is None
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 1 and len({e["SHOAL_JOB_ID"] for e in envs.values()}) == 1
    # The namespace really is the host's: its only address is the host's.
    where = tbcli("run", "--name", NAME, "--no-prefix", "--", "sh", "-c", "ip -4 -o addr show dev eth0")
    assert sorted(line.split()[3] for line in where.stdout.splitlines()) == sorted(
        f"{h['address']}/24" for h in hosts for _ in range(RPH)
    )
    # One rank fails: the job fails with its code and the others are stopped.
    fail = tbcli(
        "run", "--name", NAME, "--", sys.executable, "-c",
        "import os, sys, time; r = int(os.environ['RANK']); time.sleep(0 if r == 3 else 60); sys.exit(3)",
        timeout=60,
    )  # fmt: skip
    assert fail.returncode == 3 and "rank 3 exited with code 3" in fail.stderr
    missing = tbcli("run", "--name", NAME, "--", "/nonexistent/program")
    assert missing.returncode == 127 and "cannot start '/nonexistent/program'" in missing.stderr


@needs_netns
def test_collectives_across_hosts(bed: dict[str, object]):
    proc = tbcli("run", "--name", NAME, "--timeout", "240", "--", sys.executable, str(WORKER), timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert "[0]: testbed collectives: all ok" in proc.stdout
    assert f"[0]: hosts of the ranks: {[r // RPH for r in range(HOSTS * RPH)]}" in proc.stdout
    for algo in ("allreduce hierarchical", "broadcast pc ", "broadcast ta_pc", "broadcast binomial"):
        assert f"[0]: {algo}" in proc.stdout, f"{algo} did not run:\n{proc.stdout[-3000:]}"


@needs_netns
def test_bench_on_the_testbed(bed: dict[str, object], tmp_path: Path):
    """`shoal testbed bench` runs shoal (and OpenMPI when installed) on the hosts, checked and reported."""
    against = ["--against", "mpi"] if shutil.which("mpirun") and _has("mpi4py") else []
    out = tmp_path / "bench"
    proc = tbcli(
        "bench", "allreduce", "--name", NAME, "--hosts", "2", "--sizes", "8,64K", "--algo", "ring,hierarchical",
        "--repeats", "1", "--iters", "3", "--warmup", "1", "--no-plot", "--no-progress", "--out", str(out), *against,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["nranks"] == 2 * RPH and doc["testbed"]["hosts"] == 2 and doc["testbed"]["ranks_per_host"] == RPH
    assert doc["testbed"]["link"]["rate"] == "200mbit" and doc["roofline"] is None
    names = [s["name"] for s in doc["series"]]
    assert names == ["shoal:ring", "shoal:hierarchical", *(["mpi"] if against else [])]
    for s in doc["series"]:
        assert s["status"] == "ok", s
        assert [r["size"] for r in s["results"]] == [8, 65536] and all(r["errors"] == 0 for r in s["results"])
    assert "%link" in proc.stdout and "on 2 hosts x 2" in proc.stdout


@needs_netns
def test_switch_namespace_and_partial_down():
    name = f"{NAME}s"
    tbcli("down", "--name", name)
    try:
        proc = tbcli("up", "--name", name, "--hosts", "2", "--link", "1gbit", "--switch")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        st = json.loads(tbcli("status", "--name", name, "--json").stdout)
        assert st["switch"]["address"] == "10.77.0.254" and st["switch"]["endpoint"] == "10.77.0.254:9800"
        assert f"{name}-ina" in ours(name)
        env = tbcli("run", "--name", name, "--", sys.executable, "-c", "import os; print(os.environ['SHOAL_SWITCH'])")
        assert env.returncode == 0 and "]: 10.77.0.254:9800" in env.stdout
        if st["switch"]["daemon"] != "running":
            assert "not available yet" in st["switch"]["daemon"] or "exited" in st["switch"]["daemon"]
    finally:
        down = tbcli("down", "--name", name)
        assert down.returncode == 0, down.stderr
    assert ours(name) == []

    # A partial `up` (killed half-way): leftovers make `up` refuse, and `down` removes them.
    ip = netns.find_tool("ip") or "ip"
    for ns in (f"{name}-sw", f"{name}-h1"):
        subprocess.run([ip, "netns", "add", ns], check=True)
    subprocess.run(
        [ip, "link", "add", "eth0", "netns", f"{name}-h1", "type", "veth", "peer", "name", "h1", "netns", f"{name}-sw"],
        check=True,
    )
    try:
        refused = tbcli("up", "--name", name, "--hosts", "2")
        assert refused.returncode == 1 and "left from an earlier testbed" in refused.stderr
    finally:
        down = tbcli("down", "--name", name)
    assert down.returncode == 0 and "removed namespaces" in down.stdout
    assert ours(name) == []


@needs_netns
def test_down_of_nothing_and_run_without_testbed():
    name = f"{NAME}n"
    assert tbcli("down", "--name", name).returncode == 0
    proc = tbcli("run", "--name", name, "--", "true")
    assert proc.returncode == 1 and "testbed up" in proc.stderr
    assert tbcli("status", "--name", name).returncode == 1


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_non_root_is_told_clearly():
    proc = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-m", "shoal.cli"]
        + ["testbed", "up", "--name", f"{NAME}r", "--hosts", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "root" in proc.stderr


@needs_netns
def test_failed_up_removes_what_it_made(monkeypatch: pytest.MonkeyPatch):
    from shoal.testbed import cli

    name = f"{NAME}f"
    calls = []

    def failing(dev: str, link: shaping.Link, caps: shaping.Capabilities) -> list[list[str]]:
        calls.append(dev)
        if len(calls) == 3:  # the second host's first link end: half a testbed exists by now
            return [["qdisc", "add", "dev", dev, "root", "bogus-qdisc"]]
        return shaping.shape_commands(dev, link, caps)

    monkeypatch.setattr(cli, "shape_commands", failing)
    with pytest.raises(netns.TestbedError, match="bogus-qdisc"):
        cli.up(name, 3, 1, shaping.Link.parse("100mbit"))
    assert len(calls) == 3
    assert ours(name) == [] and not tb_state.state_path(name).exists()
