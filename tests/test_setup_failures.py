"""A transport setup that cannot succeed (ranks that disagree on the
transport or the world size, a rank that never arrives) fails on every rank
that started, within SHOAL_TIMEOUT, with an error that names the cause, and
leaves no shared-memory segment behind."""

from __future__ import annotations

import os
import re
import uuid

from conftest import spawn_ranks

TIMEOUT = 3.0


def segments_of(job: str) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if job in name]


def run_failing(n: int, rank_env: dict[int, dict[str, str]]) -> tuple[list[tuple[float, str]], str]:
    """Starts n ranks (rank r with rank_env[r] on top), all of which must fail;
    returns each rank's (seconds until it raised, message) and the job id."""
    job = uuid.uuid4().hex
    results = spawn_ranks(
        n,
        "setup_failure.py",
        env={"SHOAL_TIMEOUT": str(TIMEOUT)},
        timeout=60,
        rank_env=lambda r: {"SHOAL_JOB_ID": job, **rank_env.get(r, {})},
    )
    raised = []
    for r, res in enumerate(results):
        m = re.search(r"RAISED after ([\d.]+)s: \w+: (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr}"
        raised.append((float(m[1]), m[2]))
    return raised, job


def test_mismatched_transport_is_named_at_once_and_leaks_nothing() -> None:
    raised, job = run_failing(2, {0: {"SHOAL_TRANSPORT": "shm"}, 1: {"SHOAL_TRANSPORT": "tcp"}})
    for r, (secs, msg) in enumerate(raised):
        assert "rank 1 uses tcp but rank 0 uses shm (SHOAL_TRANSPORT must be alike" in msg, (r, msg)
        assert secs < TIMEOUT, (r, secs, msg)
    assert segments_of(job) == []


def test_disagreeing_world_sizes_are_named_and_leak_nothing() -> None:
    # Rank 1 believes in a third rank: the rendezvous tells both at once.
    raised, job = run_failing(2, {1: {"WORLD_SIZE": "3"}})
    for r, (secs, msg) in enumerate(raised):
        assert "ranks disagree on the world size: rank 0 has 2, rank 1 has 3" in msg, (r, msg)
        assert secs < TIMEOUT, (r, secs, msg)
    assert segments_of(job) == []


def test_a_rank_that_never_starts_fails_the_others_in_time_and_leaks_nothing() -> None:
    # Ranks 0 and 1 of a world of 3; rank 2 never starts. The rendezvous,
    # before any transport exists, notices: rank 0 waits for rank 2's host,
    # rank 1 for rank 0's list of hosts.
    raised, job = run_failing(2, {0: {"WORLD_SIZE": "3"}, 1: {"WORLD_SIZE": "3"}})
    for r, (secs, msg) in enumerate(raised):
        assert secs < TIMEOUT + 2, (r, secs, msg)
    assert re.search(r"rank 2\b|host/2\b", raised[0][1]), raised[0]
    assert segments_of(job) == []


def test_a_rank_with_another_job_secret_is_refused_and_says_so() -> None:
    # Over TCP the rank with the other secret finds out at its first
    # connection; the rank it tried waits for the real one until SHOAL_TIMEOUT.
    raised, job = run_failing(
        2,
        {
            0: {"SHOAL_TRANSPORT": "tcp", "SHOAL_SECRET": "a" * 32},
            1: {"SHOAL_TRANSPORT": "tcp", "SHOAL_SECRET": "b" * 32},
        },
    )
    for r, (secs, msg) in enumerate(raised):
        assert secs < TIMEOUT + 2, (r, secs, msg)
    assert "secret" in raised[1][1], raised[1]
    assert segments_of(job) == []
