"""Helpers for tests that launch real processes through `shoal run`."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from shoal.algo import Builder

HERE = Path(__file__).parent
WORKERS = HERE / "workers"


def launch(
    n: int, script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 240, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Runs `script` (a file under tests/workers) on n ranks with the real launcher."""
    full_env = {**os.environ, **(env or {})}
    cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", str(n), "--", sys.executable, str(WORKERS / script), *args]
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-6000:]}"
        )
    return proc


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports of loopback: the sockets stay bound until
    all are picked (two `free_port()` in a row may return the same one)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def init_with(
    env: dict[str, str], timeout: float = 60, max_memory: int | None = None
) -> subprocess.CompletedProcess[str]:
    """A one-rank `shoal.init()` in a fresh process with `env` on top of an
    environment without SHOAL_* or launcher variables; prints `initialised`.
    `max_memory` bounds its address space (bytes), so that a test of a read
    without bound fails instead of taking the machine's memory."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SHOAL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    code = "import shoal; shoal.init(); print('initialised')"

    def limit_memory() -> None:
        import resource

        if max_memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))

    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit_memory,
    )


def spawn_ranks(
    n: int,
    script: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    rank_env: Callable[[int], dict[str, str]] | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    """Starts n ranks directly (torchrun's environment convention, no launcher),
    so that every rank runs to its own end even when another one fails."""
    import uuid

    base = {
        **os.environ,
        **(env or {}),
        "WORLD_SIZE": str(n),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "SHOAL_JOB_ID": uuid.uuid4().hex,
        "PYTHONUNBUFFERED": "1",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS / script), *args],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r), **(rank_env(r) if rank_env else {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(n)
    ]
    results = []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"rank {r} of {script} hung for {timeout}s")
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


def ucx_missing() -> str | None:
    """Why the UCX tests cannot run here (libucp cannot be loaded), or None."""
    try:
        ctypes.CDLL("libucp.so.0")
    except OSError as e:
        return f"libucp cannot be loaded ({e}); apt-get install libucx0"
    return None


def builtin_ring_in_python(b: Builder) -> None:
    """The built-in ring allreduce's steps, written in Python (phases.ring_* are
    the built-in ring's phases): the simulator's tests register it under their
    own names and expect the built-in ring's results."""
    from shoal import algo  # here: this file imports nothing of shoal's at collection

    data = algo.output(0, b.count)
    b.copy(algo.input(0, b.count), data)
    blocks = data.split(b.world)
    algo.phases.ring_reduce_scatter(b, blocks)
    algo.phases.ring_allgather(b, blocks, round0=b.world)
