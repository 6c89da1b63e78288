"""The rendezvous store against strangers and mishaps (docs/security.md, "The
rendezvous store"; docs/architecture.md, "Rendezvous").

Real ranks (tests/workers/store_job.py) meet at rank 0's store; the stranger
is a plain Python socket that speaks the store's protocol, without the job
secret or with a wrong one. The same code with the right secret is the
control: it shows the stranger fails for want of the secret, not for a wrong
implementation of the protocol.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import WORKERS, free_port

SECRET = "a-test-job-secret-0123456789abcdef"
WRONG_SECRET = "not-the-job-secret-0123456789abcdef"
#: The server drops a connection that has not finished the handshake by then (store.rs HANDSHAKE_TIMEOUT).
HANDSHAKE_SECONDS = 5.0

# The store's wire protocol, as docs/security.md specifies it.
MAGIC = b"shoalkv1"
OP_SET, OP_GET, OP_ADD = 1, 2, 3
ST_OK, ST_TIMEOUT, ST_ERROR = 0, 1, 2
ACCEPTED, REFUSED = 0, 1


def hmac256(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def store_key(secret: str) -> bytes:
    """Key::from_material(secret).derive("store") of crates/shoal-transport/src/auth.rs."""
    return hmac256(hmac256(b"shoal secret", secret.encode()), b"shoal derive\0", b"store")


def prove(key: bytes, role: str, challenge: bytes) -> bytes:
    return hmac256(key, b"shoal prove\0", role.encode(), b"\0", challenge)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def handshake(sock: socket.socket, secret: str) -> int:
    """The client side of the store handshake; returns the server's verdict
    (and checks the server's own proof when it accepts)."""
    key, nonce = store_key(secret), os.urandom(32)
    sock.sendall(MAGIC + nonce)
    challenge = recv_exact(sock, 40)
    assert challenge[:8] == MAGIC, challenge
    sock.sendall(prove(key, "store client", challenge[8:]))
    verdict = recv_exact(sock, 1)[0]
    if verdict == ACCEPTED:
        assert recv_exact(sock, 32) == prove(key, "store server", nonce), "the server proved another secret"
    return verdict


def field(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def req_set(key: str, value: bytes) -> bytes:
    return bytes([OP_SET]) + field(key.encode()) + field(value)


def req_get(key: str, timeout_ms: int = 1000) -> bytes:
    return bytes([OP_GET]) + field(key.encode()) + struct.pack("<Q", timeout_ms)


def req_add(key: str, delta: int) -> bytes:
    return bytes([OP_ADD]) + field(key.encode()) + struct.pack("<q", delta)


def error_reply(sock: socket.socket) -> str:
    """Reads a reply that must be ERROR; returns its message."""
    status = recv_exact(sock, 1)[0]
    assert status == ST_ERROR, status
    (n,) = struct.unpack("<I", recv_exact(sock, 4))
    return recv_exact(sock, n).decode()


def assert_dropped(sock: socket.socket, within: float = 3.0) -> None:
    """The server closes `sock` within `within` seconds without answering."""
    sock.settimeout(within)
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        return
    except socket.timeout:
        pytest.fail(f"the store kept a stranger's connection open for {within}s")
    assert data == b"", f"the store answered a stranger: {data!r}"


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


# ---------------------------------------------------------------------------
# Ranks started one by one, so a test can act between them.


def rank_env(rank: int, world: int, port: int, extra: dict[str, str]) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SHOAL_", "MASTER_", "RANK", "WORLD_SIZE"))}
    return {
        **keep,
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "SHOAL_SECRET": SECRET,
        "SHOAL_TIMEOUT": "20",
        "SHOAL_CALIBRATE": "0",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


class Job:
    """Ranks of store_job.py, started when the test says; killed if left running."""

    def __init__(self, world: int, port: int | None = None, **env: str) -> None:
        self.world, self.port, self.env = world, port or free_port(), env
        self.procs: dict[int, subprocess.Popen[str]] = {}

    def start(self, rank: int, *args: str, **env: str) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, str(WORKERS / "store_job.py"), *args],
            env=rank_env(rank, self.world, self.port, {**self.env, **env}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs[rank] = p
        return p

    def finish(self, timeout: float = 60) -> dict[int, subprocess.CompletedProcess[str]]:
        done = {}
        for rank, p in sorted(self.procs.items()):
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"rank {rank} hung for {timeout}s")
            done[rank] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        return done

    def kill(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()


@contextlib.contextmanager
def job(world: int, **env: str) -> Iterator[Job]:
    j = Job(world, **env)
    try:
        yield j
    finally:
        j.kill()


def assert_all_done(results: dict[int, subprocess.CompletedProcess[str]]) -> None:
    for rank, res in results.items():
        assert res.returncode == 0 and "DONE" in res.stdout, f"rank {rank}:\n{res.stdout}\n{res.stderr}"


def tcp_table() -> list[tuple[str, int, str, int, str]]:
    """(local ip, local port, remote ip, remote port, state) of every IPv4 TCP socket."""

    def ip_port(text: str) -> tuple[str, int]:
        ip, port = text.split(":")
        return socket.inet_ntoa(bytes.fromhex(ip)[::-1]), int(port, 16)

    rows = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            rows.append((*ip_port(fields[1]), *ip_port(fields[2]), fields[3]))
    return rows


def wait_listening(port: int, proc: subprocess.Popen[str], timeout: float = 30) -> set[str]:
    """Waits until something listens on `port`; returns the addresses it listens on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {lip for lip, lport, _, _, state in tcp_table() if lport == port and state == "0A"}
        found |= {"::"} if port_in_tcp6(port) else set()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"rank 0 exited with {proc.returncode}: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail(f"nothing listens on port {port} after {timeout}s")


def port_in_tcp6(port: int) -> bool:
    """Whether an IPv6 socket listens on `port` (the wildcard :: covers IPv4 too)."""
    with open("/proc/net/tcp6") as f:
        next(f)
        return any(int(ln.split()[1].split(":")[1], 16) == port and ln.split()[3] == "0A" for ln in f)


def proc_status(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise KeyError(field_name)


# ---------------------------------------------------------------------------


def test_store_listens_on_master_addr_only() -> None:
    with job(2) as j:
        r0 = j.start(0)
        assert wait_listening(j.port, r0) == {"127.0.0.1"}
        j.start(1)
        assert_all_done(j.finish())


@pytest.mark.parametrize("stranger", ["old protocol", "wrong secret"])
def test_stranger_is_dropped_and_the_job_starts(stranger: str) -> None:
    # No SHOAL_JOB_ID: the job id is the predictable "default", as under a bare torchrun.
    with job(2) as j:
        r0 = j.start(0)
        wait_listening(j.port, r0)
        silent = connect(j.port)  # says nothing
        attacks = [
            req_add("shoal/default/generations", 1),
            req_add("shoal/default/inits/w2", 1),  # the counter of shoal before the job secret
            req_set("shoal/default/0/rdzv/host/1", b"evil-host"),
            req_get("shoal/default/w2/open"),
            req_get("shoal/default/0/rdzv/host/0"),
        ]
        for request in attacks:
            with connect(j.port) as s:
                if stranger == "wrong secret":
                    assert handshake(s, WRONG_SECRET) == REFUSED
                with contextlib.suppress(OSError):
                    s.sendall(request)
                assert_dropped(s)
        assert_dropped(silent, within=HANDSHAKE_SECONDS + 3)
        silent.close()
        idle = connect(j.port)  # held open while the job starts
        started = time.monotonic()
        j.start(1)
        results = j.finish()
        assert_all_done(results)
        assert time.monotonic() - started < 15
        idle.close()
    assert "refused" in results[0].stderr, results[0].stderr


def test_member_with_the_secret_is_served_within_limits() -> None:
    limit = 1 << 20
    with job(2, SHOAL_STORE_MAX_VALUE=str(limit)) as j:
        r0 = j.start(0)
        wait_listening(j.port, r0)
        with connect(j.port) as s:
            assert handshake(s, SECRET) == ACCEPTED
            s.sendall(req_set("probe", b"x" * 100))
            assert recv_exact(s, 1)[0] == ST_OK
            s.sendall(req_get("probe"))
            assert recv_exact(s, 5) == bytes([ST_OK]) + struct.pack("<I", 100)
            assert recv_exact(s, 100) == b"x" * 100
        # An oversized value is refused from its length field, before a byte of it is stored.
        with connect(j.port) as s:
            assert handshake(s, SECRET) == ACCEPTED
            s.sendall(req_set("big", b"\0" * (8 * limit))[: 64 << 10])
            message = error_reply(s)
            assert "SHOAL_STORE_MAX_VALUE" in message and str(limit) in message, message
            assert_dropped(s)
        rss = proc_status(r0.pid, "VmRSS")
        for _ in range(4):
            with connect(j.port) as s:
                assert handshake(s, SECRET) == ACCEPTED
                with contextlib.suppress(OSError):
                    s.sendall(req_set("big", b"\1" * (8 * limit)))
        grown_kib = proc_status(r0.pid, "VmRSS") - rss
        assert grown_kib < 8 * 1024, f"rank 0 grew by {grown_kib} KiB"
        with connect(j.port) as s:
            assert handshake(s, SECRET) == ACCEPTED
            s.sendall(req_get("k" * 100_000))
            assert "key" in error_reply(s)
        j.start(1)
        assert_all_done(j.finish())


def test_idle_connections_do_not_make_threads() -> None:
    with job(2) as j:
        r0 = j.start(0)
        wait_listening(j.port, r0)
        threads, fds = proc_status(r0.pid, "Threads"), len(os.listdir(f"/proc/{r0.pid}/fd"))
        idle = [connect(j.port) for _ in range(400)]
        time.sleep(1.0)
        assert proc_status(r0.pid, "Threads") - threads < 8
        assert len(os.listdir(f"/proc/{r0.pid}/fd")) - fds < 200
        j.start(1)  # joins while the 400 strangers still hold their connections
        assert_all_done(j.finish())
        for s in idle:
            s.close()


@pytest.mark.parametrize("world", [2, 3, 4])
def test_reinit_with_the_default_store(world: int) -> None:
    with job(world) as j:
        for r in range(world):
            j.start(r, "3")
        results = j.finish()
    assert_all_done(results)
    assert all(res.stdout.count("OK") == 3 for res in results.values())


@pytest.mark.parametrize("missing", [0, 1])
def test_crashed_rendezvous_does_not_poison_a_file_store(tmp_path: Path, missing: int) -> None:
    store = {"SHOAL_STORE_PATH": str(tmp_path / "rdzv"), "SHOAL_JOB_ID": "reused"}
    # A launch in which rank `missing` never arrives: the others give up.
    with job(3, **store, SHOAL_TIMEOUT="2") as j:
        for r in range(3):
            if r != missing:
                j.start(r)
        results = j.finish()
    for r, res in results.items():
        assert res.returncode == 3 and "INIT 0 FAILED" in res.stdout, (r, res.stdout, res.stderr)
    # The next launch with the same job id works, whoever comes first.
    with job(3, **store) as j:
        j.start(1)
        j.start(2)
        time.sleep(0.5)
        j.start(0)
        assert_all_done(j.finish())


def test_store_host_exit_is_named() -> None:
    with job(3, SHOAL_TIMEOUT="30") as j:  # rank 2 never comes, so rank 1 waits on the store
        r0 = j.start(0)
        wait_listening(j.port, r0)
        r1 = j.start(1)
        deadline = time.monotonic() + 30
        while sum(1 for row in tcp_table() if row[3] == j.port and row[4] == "01") < 2:
            assert time.monotonic() < deadline and r1.poll() is None, "rank 1 never connected"
            time.sleep(0.05)
        time.sleep(1.0)
        os.kill(r0.pid, signal.SIGKILL)
        killed = time.monotonic()
        out, _ = r1.communicate(timeout=30)
        assert time.monotonic() - killed < 10
    assert "closed the connection" in out and "did rank 0 exit?" in out, out
