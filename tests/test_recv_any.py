"""Receive from any source in the core (``shoal.recv(x)`` without ``src``):
matching, the source it reports, arrival order, and failures (a message of
another size, a wait nobody answers), over shm and tcp."""

from __future__ import annotations

import re

import pytest
from conftest import launch, spawn_ranks


@pytest.mark.parametrize(("world", "transport"), [(2, "shm"), (3, "shm"), (4, "shm"), (3, "tcp")])
def test_recv_from_any_source(world: int, transport: str) -> None:
    proc = launch(world, "recv_any.py", "match", env={"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "60"})
    assert proc.stdout.count("OK recv_any match") == world, proc.stdout[-3000:]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_recv_from_any_source_of_another_size_raises(transport: str) -> None:
    results = spawn_ranks(2, "recv_any.py", "mismatch", env={"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "30"})
    out = results[0].stdout
    assert "RAISED" in out and "OK recv_any mismatch" in out, (out, results[0].stderr[-3000:])
    assert "MismatchError" in out and "recv(4 x float32, tag=2)" in out, out


def test_recv_from_any_source_nobody_sends_times_out_naming_the_wait() -> None:
    results = spawn_ranks(3, "recv_any.py", "stall", env={"SHOAL_TIMEOUT": "2"})
    out = results[0].stdout
    m = re.search(r"RAISED after ([\d.]+) s: (.*)", out)
    assert m, (out, results[0].stderr[-3000:])
    assert 1.5 <= float(m[1]) <= 8, out
    assert "from any source" in m[2] and "any of ranks [1, 2]" in m[2], m[2]
    for r, p in enumerate(results):
        assert p.returncode == 0, (r, p.stdout, p.stderr[-2000:])
