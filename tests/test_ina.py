"""In-network aggregation on real processes: a `shoal switch` daemon, workers
launched by `shoal run` with SHOAL_SWITCH, results checked against numpy; loss,
two jobs, two trees, int32 mode, and fallback when the switch is missing or dies."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import HERE, WORKERS, free_port, free_ports, launch, spawn_ranks


def start_switch(port: int, metrics: int, *args: str) -> subprocess.Popen[str]:
    """Starts `shoal switch` on loopback `port` (metrics on `metrics`) and waits until it serves."""
    cmd = [
        sys.executable,
        "-m",
        "shoal.cli",
        "switch",
        "--listen",
        f"127.0.0.1:{port}",
        "--metrics",
        f"127.0.0.1:{metrics}",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{metrics}/metrics"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"switch did not start: {proc.stdout.read() if proc.stdout else ''}") from None
            time.sleep(0.05)


def stop_switch(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextmanager
def switch(*args: str) -> Iterator[tuple[str, str]]:
    """Runs `shoal switch` on loopback; yields (its address, its metrics URL).
    The daemon's process is kept in `switch.last` for tests that kill it."""
    port, metrics = free_ports(2)
    proc = start_switch(port, metrics, *args)
    try:
        switch.last = proc  # type: ignore[attr-defined]
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics"
    finally:
        stop_switch(proc)


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def run_workers(
    n: int, switch_addr: str, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return launch(n, "ina.py", *args, env={"SHOAL_SWITCH": switch_addr, **(env or {})}, check=check, timeout=600)


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_ina_allreduce_matches_numpy(world: int) -> None:
    counts = "0,1,7,1000,100003" if world <= 4 else "0,1,7,1000,20011"
    with switch() as (addr, url):
        proc = run_workers(world, addr, env={"INA_COUNTS": counts})
        assert proc.stdout.count("OK ina") == world
        assert "falls back" not in proc.stderr + proc.stdout, proc.stderr
        assert metric(url, "shoal_switch_aggregations_total") > 0


@pytest.mark.parametrize("drop", ["0.01", "0.1"])
def test_ina_exact_under_packet_loss(drop: str) -> None:
    env = {"INA_DTYPES": "float32,int32", "INA_COUNTS": "1,1000,100003"}
    with switch("--drop-rate", drop) as (addr, url):
        proc = run_workers(3, addr, env=env)
        assert proc.stdout.count("OK ina") == 3 and "falls back" not in proc.stdout + proc.stderr
        assert metric(url, "shoal_switch_retransmissions_total") > 0


def test_traces_show_the_switch_allreduces_and_their_retransmissions(tmp_path: Path) -> None:
    """SHOAL_TRACE: each allreduce through the switch is one event with what it
    did on the wire; under loss some packets are retransmitted."""
    import json

    env = {"INA_DTYPES": "float32", "INA_COUNTS": "100003", "SHOAL_TRACE": str(tmp_path)}
    with switch("--drop-rate", "0.1") as (addr, _):
        proc = run_workers(2, addr, env=env)
        assert proc.stdout.count("OK ina") == 2 and "falls back" not in proc.stdout + proc.stderr
    for rank in range(2):
        events = json.loads((tmp_path / f"rank-{rank}.json").read_text())
        ina = [e for e in events if e.get("cat") == "ina"]
        assert ina, f"rank {rank}: no switch allreduce traced"
        for e in ina:
            a = e["args"]
            assert a["status"] == "ok" and a["packets"] >= 1 and a["retransmitted"] <= a["packets"], e
            assert all(int(w) >= 1 for w in a["windows"].split(",")), e
        assert sum(e["args"]["retransmitted"] for e in ina) > 0, ina


def test_two_jobs_share_one_switch() -> None:
    env = {"SHOAL_TRANSPORT": "shm", "INA_DTYPES": "float32", "INA_COUNTS": "1,1000,100003"}
    with switch() as (addr, _):
        cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", "2", "--", sys.executable, str(WORKERS / "ina.py"), "3"]
        full_env = {**os.environ, **env, "SHOAL_SWITCH": addr}
        jobs = [
            subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [j.communicate(timeout=600) for j in jobs]
        for j, (out, err) in zip(jobs, outs):
            assert j.returncode == 0 and out.count("OK ina") == 2, out + err
            assert "falls back" not in out + err


def test_two_trees() -> None:
    with switch() as (a, url_a), switch() as (b, url_b):
        proc = run_workers(3, f"{a},{b}", env={"INA_DTYPES": "float32,float16", "INA_COUNTS": "1,1000,100003"})
        assert proc.stdout.count("OK ina") == 3 and "falls back" not in proc.stdout + proc.stderr
        assert metric(url_a, "shoal_switch_aggregations_total") > 0
        assert metric(url_b, "shoal_switch_aggregations_total") > 0


def test_int32_exponent_mode_on_an_integer_only_switch() -> None:
    env = {"SHOAL_INA_INT32": "1", "INA_DTYPES": "float32", "INA_COUNTS": "1,1000,100003"}
    with switch("--int-only") as (addr, url):
        proc = run_workers(3, addr, env=env)
        assert proc.stdout.count("OK ina") == 3 and "falls back" not in proc.stdout + proc.stderr
        assert metric(url, "shoal_switch_aggregations_total") > 0


def test_unreachable_switch_falls_back_with_a_warning() -> None:
    proc = run_workers(3, f"127.0.0.1:{free_port()}", env={"INA_DTYPES": "float32", "INA_COUNTS": "1,1000"})
    assert proc.stdout.count("OK ina") == 3
    assert "in-network aggregation unavailable" in proc.stdout + proc.stderr
    assert "falls back to host algorithms" in proc.stdout + proc.stderr


def test_switch_killed_mid_allreduce_falls_back_and_stays_correct() -> None:
    env = {"INA_DTYPES": "float32", "INA_COUNTS": "100003", "SHOAL_INA_TIMEOUT": "1"}
    with switch() as (addr, url):
        cmd = [
            sys.executable,
            "-m",
            "shoal.cli",
            "run",
            "-n",
            "3",
            "--",
            sys.executable,
            str(WORKERS / "ina.py"),
            "400",
        ]
        job = subprocess.Popen(
            cmd,
            env={**os.environ, **env, "SHOAL_SWITCH": addr},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while metric(url, "shoal_switch_aggregations_total") < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        switch.last.kill()  # type: ignore[attr-defined]  # SIGKILL: the daemon dies mid-allreduce
        out, err = job.communicate(timeout=600)
    assert job.returncode == 0 and out.count("OK ina") == 3, out + err
    assert "falls back to host algorithms" in out + err


def test_a_restarted_switch_is_readmitted_and_the_job_continues_exactly() -> None:
    """The switch dies mid-job: allreduce goes on over host algorithms (exact), and after the back-off
    (SHOAL_INA_RETRY_CALLS calls) every rank re-admits the job to the restarted switch, which then sums."""
    port, metrics = free_ports(2)
    url = f"http://127.0.0.1:{metrics}/metrics"
    env = {
        "INA_DTYPES": "float32",
        "INA_COUNTS": "20011",
        "SHOAL_INA_TIMEOUT": "1",
        "SHOAL_INA_RETRY_CALLS": "4",
        "SHOAL_SWITCH": f"127.0.0.1:{port}",
    }
    first = start_switch(port, metrics, "--threads", "2")
    cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", "3", "--", sys.executable, str(WORKERS / "ina.py"), "500"]
    job = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while metric(url, "shoal_switch_aggregations_total") < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        first.kill()  # SIGKILL: the daemon dies mid-allreduce
        first.wait()
        second = start_switch(port, metrics, "--threads", "2")
        try:
            out, err = job.communicate(timeout=120)
            readmitted = metric(url, "shoal_switch_jobs_admitted_total")
            summed = metric(url, "shoal_switch_aggregations_total")
        finally:
            stop_switch(second)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0 and out.count("OK ina") == 3, out + err
    assert "falls back to host algorithms" in out + err
    assert readmitted >= 1 and summed > 100, (readmitted, summed, err)


def test_sub_groups_use_the_switch() -> None:
    """Each sub-group is a switch job of its own members: exact sums, no fallback;
    finalize ends every one of them though the program still holds the groups."""
    with switch() as (addr, url):
        res = launch(4, "ina_group.py", env={"SHOAL_SWITCH": addr, "INA_METRICS_URL": url}, timeout=120)
        assert res.stdout.count("OK ina groups") == 4, res.stdout + res.stderr
        assert "falls back" not in res.stdout + res.stderr
        assert metric(url, "shoal_switch_jobs_admitted_total") == 3  # the world's and the two groups'
        assert metric(url, "shoal_switch_aggregations_total") > 0


def test_a_two_level_tree_from_shoal_switch_with_real_switch_processes() -> None:
    """SHOAL_SWITCH names a root and two leaves (`shoal switch --parent ROOT`), each leaf serving two ranks:
    the leaves sum their ranks and send partial sums up; results are exact, nothing falls back."""
    env = {"INA_DTYPES": "float32,int32", "INA_COUNTS": "1,1000,100003"}
    with switch("--threads", "2") as (root, root_url):
        with switch("--parent", root) as (leaf1, url1), switch("--parent", root, "--threads", "1") as (leaf2, url2):
            res = run_workers(4, f"{root}/{leaf1}=0+1/{leaf2}=2-3", env=env)
            assert res.stdout.count("OK ina") == 4, res.stdout + res.stderr
            assert "falls back" not in res.stdout + res.stderr
            for url in (root_url, url1, url2):
                assert metric(url, "shoal_switch_aggregations_total") > 0, url


# --- strangers, limits and failures (issue 10) -------------------------------------------------------------------

HEADER_V1 = struct.Struct(">HBBBBBbIIHHIHHHH")  # the 32-byte data header of protocol version 1
HEADER_V2 = struct.Struct(">HBBBBBbIHHIHHHHQ")  # the 36-byte data header of version 2 (tag last)


def forged_data(version: int, job: int, token: int, member: int, seq: int, slots: int, count: int) -> bytes:
    """A DATA packet a stranger makes up: the job id (and for version 1 the token) it learnt, a random tag."""
    slot = (seq % slots) | (0x8000 if (seq // slots) % 2 else 0)
    payload = struct.pack(f"<{count}f", *([1000.0] * count))
    if version == 1:
        head = HEADER_V1.pack(0x5348, 1, 0, 0, 0, 0, 0, job, token, 0, member, seq, slot, count, 1, 0xFFFF)
    else:
        tag = int.from_bytes(os.urandom(8), "big")
        head = HEADER_V2.pack(0x5348, 2, 0, 0, 0, 0, 0, job, 0, member, seq, slot, count, 1, 0xFFFF, tag)
    return head + payload


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def read_until_eof(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """Everything the peer sends until it closes (True) or `timeout` passes (False)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except socket.timeout:
        return data, False
    except ConnectionResetError:
        return data, True
    return data, True


def leaked_params(store: Path) -> dict[str, str] | None:
    """What a stranger who can read the job's store finds about its switch job."""
    for f in store.rglob("*"):
        try:
            text = f.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if text.startswith("tree="):
            return dict(kv.split("=", 1) for kv in text.split("\n")[0].split(" ") if "=" in kv)
    return None


def attack(store: Path, switch_addr: str, stop: threading.Event) -> None:
    """Forges DATA for every member and sequence number, claims members' addresses (redirect) and tries to
    RELEASE the job, with whatever the store leaks (job id; a token where the protocol had one)."""
    while (params := leaked_params(store)) is None and not stop.is_set():
        time.sleep(0.01)
    if params is None:
        return
    host, port = switch_addr.rsplit(":", 1)
    data_addr = params["data"].rsplit(":", 1)
    job, token, slots = int(params["job"]), int(params.get("token", "0")), int(params["slots"])
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    next_release, seq = 0.0, 0
    while not stop.is_set():
        for member in range(4):
            for version in (1, 2):
                pkt = forged_data(version, job, token, member, seq % 4096, slots, 359)
                udp.sendto(pkt, (data_addr[0], int(data_addr[1])))
        seq += 1
        if time.monotonic() > next_release:
            next_release = time.monotonic() + 0.2
            for body in (struct.pack(">BII", 3, job, token), struct.pack(">BI", 3, job)):
                with socket.create_connection((host, int(port)), timeout=2) as s:
                    s.sendall(frame(body))
                    read_until_eof(s, 2)
        time.sleep(0.0002)


def test_a_stranger_who_reads_the_store_cannot_change_results_or_release_the_job(tmp_path: Path) -> None:
    env = {"SHOAL_STORE_PATH": str(tmp_path), "INA_DTYPES": "float32", "INA_COUNTS": "1000,20011"}
    with switch() as (addr, url):
        stop = threading.Event()
        attacker = threading.Thread(target=attack, args=(tmp_path, addr, stop))
        attacker.start()
        try:
            proc = run_workers(4, addr, "8", env=env, check=False)
        finally:
            stop.set()
            attacker.join()
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0 and proc.stdout.count("OK ina") == 4, out[-4000:]
        assert "falls back" not in out and "unavailable" not in out, out[-4000:]
        assert metric(url, 'shoal_switch_drops_total{reason="bad_tag"}') > 0
        assert metric(url, "shoal_switch_jobs_released_total") == metric(url, "shoal_switch_jobs_admitted_total") == 1


def test_unauthenticated_control_connections_are_refused_and_closed() -> None:
    with switch() as (addr, url):
        host, port = addr.rsplit(":", 1)
        v1_admit = struct.pack(">BBHHHBHIB", 1, 1, 0, 2, 16, 1, 0, 0, 0)
        for body in (v1_admit, struct.pack(">BI", 3, 1), b"\x06\x03" + b"\x00" * 31):  # ADMIT, RELEASE, short HELLO
            with socket.create_connection((host, int(port)), timeout=2) as s:
                s.sendall(frame(body))
                reply, closed = read_until_eof(s, 5)
                assert closed, body
                assert reply[4:5] == b"\x05", reply  # ERROR, then FIN
        assert metric(url, "shoal_switch_jobs_admitted_total") == 0


def test_a_bad_frame_gets_an_error_and_a_fin() -> None:
    with switch() as (addr, _):
        host, port = addr.rsplit(":", 1)
        for junk in (b"\xff\xff\xff\xff" + b"x" * 100, b"\x00\x00\x00\x00", frame(b"\x63garbage")):
            with socket.create_connection((host, int(port)), timeout=2) as s:
                s.sendall(junk)
                _, closed = read_until_eof(s, 5)
                assert closed, junk


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_switch_fd_count_stays_flat_after_many_control_connections() -> None:
    with switch() as (addr, url):
        pid = switch.last.pid  # type: ignore[attr-defined]
        host, port = addr.rsplit(":", 1)
        before = fd_count(pid)
        for i in range(600):
            with socket.create_connection((host, int(port)), timeout=2) as s:
                if i % 3 == 1:
                    s.sendall(b"\x00\x00\x00\x05junk!")
                elif i % 3 == 2:
                    s.sendall(frame(b"\x06\x03" + os.urandom(32)))  # HELLO, then leave
                    s.recv(4096)
        deadline = time.monotonic() + 10
        while fd_count(pid) > before + 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fd_count(pid) <= before + 4, (before, fd_count(pid))
        # and the switch still serves jobs
        proc = run_workers(2, addr, env={"INA_DTYPES": "float32", "INA_COUNTS": "1000"})
        assert proc.stdout.count("OK ina") == 2 and "falls back" not in proc.stdout + proc.stderr


def test_idle_and_admitting_strangers_do_not_lock_out_a_job() -> None:
    with switch("--max-jobs", "8") as (addr, url):
        host, port = addr.rsplit(":", 1)
        held = []
        v1_admit = struct.pack(">BBHHHBHIB", 1, 1, 0, 2, 16, 1, 0, 0, 0)
        for i in range(100):
            s = socket.create_connection((host, int(port)), timeout=2)
            if i % 2 == 0:
                s.sendall(frame(v1_admit))  # enough to hold a job forever with protocol version 1
            held.append(s)
        try:
            proc = run_workers(3, addr, env={"INA_DTYPES": "float32", "INA_COUNTS": "1000,20011"})
            assert proc.stdout.count("OK ina") == 3, proc.stdout + proc.stderr
            assert "unavailable" not in proc.stderr and "falls back" not in proc.stdout + proc.stderr, proc.stderr
        finally:
            for s in held:
                s.close()


def test_a_killed_member_makes_the_others_raise_within_seconds() -> None:
    victim = 2
    with switch() as (addr, _):
        env = {"SHOAL_SWITCH": addr, "SHOAL_ALGO": "allreduce:ina", "SHOAL_TIMEOUT": "60"}
        results = spawn_ranks(4, "die.py", str(victim), env=env)
    assert results[victim].returncode == -9
    for r, res in enumerate(results):
        if r == victim:
            continue
        m = re.search(r"RAISED after ([\d.]+)s: (\w+): (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr}"
        assert float(m[1]) < 5, (r, m[0])
        assert m[2] in ("PeerDiedError", "AbortedError"), (r, m[0])


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "soon"])
def test_bad_ina_timeout_is_a_clear_error(value: str) -> None:
    env = {**os.environ, "SHOAL_SWITCH": f"127.0.0.1:{free_port()}", "SHOAL_INA_TIMEOUT": value}
    env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.run(
        [sys.executable, "-c", "import shoal; shoal.init()"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0, proc.stderr
    assert "SHOAL_INA_TIMEOUT" in proc.stderr and "panick" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--memory", "0"],
        ["--memory", "1KiB"],
        ["--max-jobs", "0"],
        ["--max-slots", "0"],
        ["--max-slots", "40000"],
        ["--ecn-threshold", "nan"],
        ["--ecn-threshold", "1.5"],
        ["--max-conns-per-client", "0"],
        ["--idle-timeout", "inf"],
        ["--memory", "99999999999999999999GiB"],
    ],
)
def test_bad_switch_arguments_are_rejected(args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "switch", "--listen", f"127.0.0.1:{free_port()}", *args],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert args[0] in proc.stderr and "panick" not in proc.stderr, proc.stderr


def test_a_switch_port_taken_is_named_in_the_error() -> None:
    """`--metrics` on the switch's own port (its control listener's): the
    error says which address of the switch could not be bound, not only
    'Address already in use'."""
    port = free_port()
    addr = f"127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "shoal.cli", "switch", "--listen", addr, "--metrics", addr]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"the metrics (TCP) address {addr}: Address already in use" in out, out


def test_the_switch_benchmark_script_runs_from_the_wheel(tmp_path: Path) -> None:
    """scripts/ina-bench.sh (the 16-core machine's switch measurement, which has
    no cargo there): a real switch per thread count, workers through it, and a
    throughput line per size with every result correct."""
    env = {
        **os.environ,
        "OUT": str(tmp_path),
        "WORKERS": "2",
        "THREADS": "1 2",
        "SIZES": "64K",
        "REPEATS": "2",
        "PORT": str(free_port()),
        "PYTHON": sys.executable,
    }
    proc = subprocess.run(
        ["bash", str(HERE.parent / "scripts" / "ina-bench.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    summary = (tmp_path / "summary.log").read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for threads in (1, 2):
        line = rf"switch threads {threads}: 0\.0625 MiB per worker, \d+ us, [\d.]+ GB/s of worker input, errors 0"
        assert re.search(line, summary), summary
