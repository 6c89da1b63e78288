"""A tiny TCP sender/receiver measuring throughput and round-trip time between two testbed hosts.

Run as a script by path (standard library only, no shoal import), one side in
each host namespace::

    python measure.py serve ADDR PORT          # prints "ready", serves until killed
    python measure.py probe ADDR PORT [--bytes N] [--pings K] [--seconds S]

`probe` prints one JSON line: ``goodput_bps`` of one bulk transfer (its
first tenth is a warm-up outside the timing: slow start) and the
distribution of ``rtt_us`` of 1-byte ping-pongs with TCP_NODELAY.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import time

CHUNK = 1 << 20


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise ConnectionError("peer closed the connection")
        buf += part
    return bytes(buf)


def serve(addr: str, port: int) -> None:
    """Serves connections one at a time: b'T' + 8-byte count = sink that many bytes then ack; b'P' = echo bytes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((addr, port))
        srv.listen(4)
        print("ready", flush=True)
        while True:
            conn, _ = srv.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                kind = conn.recv(1)
                if kind == b"T":
                    (left,) = struct.unpack("!Q", _recv_exact(conn, 8))
                    buf = bytearray(CHUNK)
                    while left > 0:
                        n = conn.recv_into(buf, min(CHUNK, left))
                        if n == 0:
                            break
                        left -= n
                    conn.sendall(b"k")
                elif kind == b"P":
                    while True:
                        b = conn.recv(1)
                        if not b:
                            break
                        conn.sendall(b)


def throughput(addr: str, port: int, nbytes: int, seconds: float) -> float:
    """Goodput (bits/s) of sending `nbytes` (or fewer if `seconds` run out), the first tenth untimed."""
    payload = b"\0" * CHUNK
    warm = nbytes // 10
    with socket.create_connection((addr, port), timeout=seconds + 30) as c:
        c.sendall(b"T" + struct.pack("!Q", nbytes))
        sent = 0
        while sent < warm:
            n = min(CHUNK, warm - sent)
            c.sendall(payload[:n])
            sent += n
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while sent < nbytes:
            n = min(CHUNK, nbytes - sent)
            c.sendall(payload[:n])
            sent += n
            if time.perf_counter() > deadline:
                break
        if sent < nbytes:
            c.shutdown(socket.SHUT_WR)  # out of time: the receiver stops at the end of what was sent
        c.recv(1)  # the receiver's ack: everything sent has arrived
        dt = time.perf_counter() - t0
    return (sent - warm) * 8 / dt


def pings(addr: str, port: int, count: int) -> list[float]:
    """Round-trip times (microseconds) of `count` 1-byte ping-pongs after 10 untimed ones."""
    out = []
    with socket.create_connection((addr, port), timeout=30) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(b"P")
        for i in range(count + 10):
            t0 = time.perf_counter()
            c.sendall(b"x")
            _recv_exact(c, 1)
            if i >= 10:
                out.append((time.perf_counter() - t0) * 1e6)
    return out


def probe(addr: str, port: int, nbytes: int, count: int, seconds: float) -> dict[str, object]:
    rtts = pings(addr, port, count)
    goodput = throughput(addr, port, nbytes, seconds)
    q = statistics.quantiles(rtts, n=10)
    return {
        "goodput_bps": goodput,
        "bytes": nbytes,
        "rtt_us": {"min": min(rtts), "median": statistics.median(rtts), "p90": q[-1], "count": len(rtts)},
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="measure.py")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve")
    s.add_argument("addr")
    s.add_argument("port", type=int)
    c = sub.add_parser("probe")
    c.add_argument("addr")
    c.add_argument("port", type=int)
    c.add_argument("--bytes", type=int, default=16 << 20)
    c.add_argument("--pings", type=int, default=200)
    c.add_argument("--seconds", type=float, default=5.0, help="cap on the bulk transfer's duration")
    ns = p.parse_args(argv)
    if ns.mode == "serve":
        serve(ns.addr, ns.port)
        return 0
    print(json.dumps(probe(ns.addr, ns.port, ns.bytes, ns.pings, ns.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
