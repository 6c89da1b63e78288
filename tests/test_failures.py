"""Failure behaviour: a dead rank, a stopped rank and mismatched collectives
raise on every surviving rank, quickly, with a message that says what
happened."""

from __future__ import annotations

import random
import re
import subprocess

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


@pytest.mark.parametrize("what", ["kind", "count", "dtype", "op", "root", "counts"])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_mismatched_collectives_raise_on_every_rank(what: str, transport: str) -> None:
    results = spawn_ranks(3, "mismatch.py", what, env={"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "60"})
    for r, res in enumerate(results):
        m = re.search(r"RAISED (\w+) at round \d+: (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr}"
        assert "mismatch" in m[2].lower(), (r, m[2])


def run_calls(
    n: int, others: str, odd: str, odd_rank: int, transport: str, rounds: int = 1
) -> list[subprocess.CompletedProcess[str]]:
    """Rank `odd_rank` calls `odd`, the others `others` (specs as in workers/mismatch.py)."""
    hosts = {"shm": {}, "tcp": {"SHOAL_TRANSPORT": "tcp"}}
    # "mixed": two emulated hosts, shm inside each, tcp between them
    rank_env = (lambda r: {"SHOAL_HOST_ID": "ab"[r * 2 // n]}) if transport == "mixed" else None
    env = {**hosts.get(transport, {}), "SHOAL_TIMEOUT": "30"}
    args = ["calls", others, odd, str(odd_rank), str(rounds)]
    return spawn_ranks(n, "mismatch.py", *args, env=env, rank_env=rank_env, timeout=90)


def call_name(spec: str) -> str:
    """How the error names a call: `broadcast:root=1,algo=pc` -> `broadcast(root=1`."""
    name, _, args = spec.partition(":")
    root = re.search(r"root=(\d+)", args)
    return f"{name}(root={root[1]}" if root else f"{name}("


def assert_every_rank_raises_mismatch(results: list[subprocess.CompletedProcess[str]], a: str, b: str) -> None:
    messages = []
    for r, res in enumerate(results):
        m = re.search(r"RAISED (\w+) at round (\d+): (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr[-3000:]}"
        kind, msg = m[1], m[3]
        assert kind in ("MismatchError", "AbortedError"), (r, kind, msg)
        assert "mismatched collectives" in msg, (r, msg)
        messages.append(msg)
    # Somebody names both calls, or the mismatch surfaced at the next call
    # through the history of earlier calls: which rank notices first is a
    # race when the odd call exchanges no message with a rank that waits.
    named = any(call_name(a) in msg and call_name(b) in msg for msg in messages)
    assert named or any("earlier calls on this communicator differ" in msg for msg in messages), messages


# The pairs in which no rank receives from the rank whose call differs: every
# rank used to return as if all were well.
UNSEEN_PAIRS = [
    ("broadcast:root=0", "reduce:root=0"),
    ("scatter:root=0", "reduce:root=0"),
    ("gather:root=0", "broadcast:root=0"),
    ("broadcast:root=0,algo=pc", "broadcast:root=1,algo=pc"),
]


@pytest.mark.parametrize("pair", UNSEEN_PAIRS, ids=lambda p: f"{p[0]}-vs-{p[1]}")
@pytest.mark.parametrize("n, odd_rank", [(2, 0), (2, 1), (3, 0), (3, 2), (4, 0), (4, 3)])
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_calls_that_exchange_nothing_still_mismatch(
    pair: tuple[str, str], n: int, odd_rank: int, transport: str
) -> None:
    results = run_calls(n, pair[0], pair[1], odd_rank, transport)
    assert_every_rank_raises_mismatch(results, *pair)


COLLECTIVES = {
    "allreduce": ["ring", "recursive_doubling", "rabenseifner", "binomial", "direct"],
    "broadcast": ["binomial", "scatter_allgather", "pc", "ta_pc"],
    "reduce": ["binomial", "direct"],
    "allgather": ["ring", "recursive_doubling", "bruck"],
    "reduce_scatter": ["ring", "halving"],
    "alltoall": ["pairwise"],
    "gather": ["linear", "binomial"],
    "scatter": ["linear", "binomial"],
    "barrier": [],
}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
REDUCING = {"allreduce", "reduce", "reduce_scatter"}


def random_call(rng: random.Random, n: int) -> str:
    name = rng.choice(sorted(COLLECTIVES))
    if name == "barrier":
        return name
    args = [f"count={rng.choice([1, 7, 1000])}", f"dtype={rng.choice(['float32', 'float64', 'int32', 'uint8'])}"]
    if name in ROOTED:
        args.append(f"root={rng.randrange(n)}")
    if name in REDUCING:
        args.append(f"op={rng.choice(['sum', 'max'])}")
    if rng.random() < 0.5:
        args.append(f"algo={rng.choice(COLLECTIVES[name])}")
    return f"{name}:{','.join(args)}"


@pytest.mark.parametrize("seed", range(12))
def test_random_pairs_of_different_calls_mismatch(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([2, 3, 4])
    transport = rng.choice(["shm", "tcp", "mixed"])
    a = random_call(rng, n)
    b = a
    while b == a:
        b = random_call(rng, n)
    odd_rank = rng.randrange(n)
    results = run_calls(n, a, b, odd_rank, transport)
    for r, res in enumerate(results):
        m = re.search(r"RAISED (\w+) at round \d+: (.*)", res.stdout)
        assert m, f"{a} vs {b} at rank {odd_rank} of {n} over {transport}: rank {r} did not raise:\n{res.stdout}"
        assert "mismatch" in m[2].lower(), (a, b, r, m[2])


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_mismatched_rounds_fail_promptly_and_keep_memory_flat(transport: str) -> None:
    """300 rounds of broadcast against reduce used to pile the unreceived
    messages up (255 MiB over tcp). Now the rank whose call finishes with
    the other's message queued, or sees it arrive later, fails, and the
    other learns from its abort. (A rank whose calls only send may finish
    a few more rounds first, as many as the other rank lags behind.)"""
    big = "count=100000"  # 400 KB a round: 120 MB after 300 rounds
    results = run_calls(2, f"broadcast:{big},algo=binomial", f"reduce:{big}", 1, transport, rounds=300)
    raised_at = []
    for r, res in enumerate(results):
        m = re.search(r"RAISED (\w+) at round (\d+)", res.stdout)
        assert m, f"rank {r} did not raise in 300 rounds:\n{res.stdout}"
        raised_at.append(int(m[2]))
        start, end = map(int, re.search(r"RSS (\d+) (\d+)", res.stdout).groups())
        assert end - start < 64 << 10, (r, start, end)
    # Both ranks' calls here only send, so on a loaded machine one rank can
    # run all its rounds while the other is descheduled (it then raises at
    # its final barrier): the first to raise must do so promptly.
    assert min(raised_at) < 100, (raised_at, [res.stdout for res in results])


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_timeout_names_the_stopped_rank(transport: str) -> None:
    """A rank SIGSTOPped inside a ring allreduce: the others time out, and
    their errors name it, not just the neighbour each of them waits on."""
    victim, n = 2, 4
    env = {"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "3"}
    results = spawn_ranks(n, "stall.py", str(victim), "9", env=env, timeout=60)
    assert results[victim].returncode == -9, results[victim].stdout
    for r, res in enumerate(results):
        if r == victim:
            continue
        m = re.search(r"RAISED after ([\d.]+)s: (\w+): (.*)", res.stdout)
        assert m, f"rank {r} did not raise:\n{res.stdout}\n{res.stderr[-3000:]}"
        assert m[2] in ("ShoalTimeoutError", "AbortedError"), (r, m[2], m[3])
        assert f"rank {victim} stopped progressing" in m[3], (r, m[3])
