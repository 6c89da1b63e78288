"""Failure behaviour: a dead rank and mismatched collectives raise on every
surviving rank, quickly, with a message that says what happened."""

from __future__ import annotations

import re

import pytest
from conftest import spawn_ranks


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_killed_rank_makes_the_others_raise_quickly(transport: str) -> None:
    victim = 2
    results = spawn_ranks(4, "die.py", str(victim), env={"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "120"})
    assert results[victim].returncode == -9
    for r, res in enumerate(results):
        if r == victim:
            continue
        m = re.search(r"RAISED after ([\d.]+)s: (\w+): (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr}"
        secs, kind, msg = float(m[1]), m[2], m[3]
        assert secs < 10, (r, secs, msg)
        assert kind in ("PeerDiedError", "AbortedError"), (r, kind, msg)
        assert f"rank {victim}" in msg, (r, msg)


@pytest.mark.parametrize("what", ["kind", "count", "dtype", "op", "root"])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_mismatched_collectives_raise_on_every_rank(what: str, transport: str) -> None:
    results = spawn_ranks(3, "mismatch.py", what, env={"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "60"})
    for r, res in enumerate(results):
        m = re.search(r"RAISED (\w+): (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr}"
        assert "mismatch" in m[2].lower(), (r, m[2])
