"""Flow control: a sender that runs ahead of its receiver waits for it
instead of filling the receiver's memory (SHOAL_UNEXPECTED_BYTES per peer),
on every transport, and every message still arrives intact."""

from __future__ import annotations

import re

import pytest
from conftest import launch, ucx_missing

UCX_MISSING = ucx_missing()

TRANSPORTS = {
    "shm": {"SHOAL_TRANSPORT": "shm"},
    # a receiver that may not read the sender's memory asks for payloads
    "shm-no-cma": {"SHOAL_TRANSPORT": "shm", "SHOAL_SHM_CMA_BYTES": "0"},
    "tcp": {"SHOAL_TRANSPORT": "tcp"},
    "ucx": {"SHOAL_TRANSPORT": "ucx", "UCX_TLS": "sm,self", "UCX_WARN_UNUSED_ENV_VARS": "n"},
    "ucx-tcp": {"SHOAL_TRANSPORT": "ucx", "UCX_TLS": "tcp", "UCX_WARN_UNUSED_ENV_VARS": "n"},
}

# (ranks, workers/flood.py arguments): each floods a receiver with 256 MB or
# more while it sleeps, which without flow control it would hold on its heap.
FLOODS = {
    "p2p-1MiB": (2, ["p2p", "256", str(1 << 20)]),
    "p2p-4KiB": (2, ["p2p", "64000", "4096"]),
    "broadcast-256KiB": (2, ["bcast", "2000", str(256 << 10)]),
    # (ucx sends collective messages of 64 KiB and more by rendezvous anyway)
    "broadcast-16KiB": (2, ["bcast", "32000", str(16 << 10)]),
}

CASES = [
    ("shm", "p2p-1MiB"),
    ("shm", "broadcast-256KiB"),
    ("shm-no-cma", "p2p-1MiB"),
    ("tcp", "p2p-1MiB"),
    ("tcp", "p2p-4KiB"),
    ("tcp", "broadcast-256KiB"),
    ("ucx", "p2p-4KiB"),
    ("ucx-tcp", "broadcast-16KiB"),
]


@pytest.mark.parametrize(("transport", "flood"), CASES)
def test_a_flood_keeps_the_receivers_memory_bounded(transport: str, flood: str) -> None:
    if transport.startswith("ucx") and UCX_MISSING:
        pytest.skip(UCX_MISSING)
    n, args = FLOODS[flood]
    proc = launch(n, "flood.py", *args, env=TRANSPORTS[transport], timeout=180)
    peaks = {int(r): int(kib) for r, kib in re.findall(r"\[(\d+)\]: PEAK (\d+)", proc.stdout)}
    assert sorted(peaks) == list(range(n)), proc.stdout
    # The sender's peak is the process's baseline (interpreter, numpy,
    # shoal); a receiver may hold a window per peer above it, not the flood.
    sender = peaks[0]
    for r in range(1, n):
        assert peaks[r] - sender < 48 << 10, (transport, flood, peaks)


@pytest.mark.parametrize("algorithm", ["pipelined_chain", "binomial"])
def test_back_to_back_broadcasts_on_four_ranks_of_a_host_finish(algorithm: str) -> None:
    # With the 2 MiB run-ahead budget, a barrier's empty message held over
    # it was read in place from its null address, which the receiver took
    # for "ask for the payload": this stream deadlocked in 4 runs of 5
    # (crates/shoal-transport/tests/flow.rs has the transport's own test).
    proc = launch(4, "chain_stream.py", algorithm, env={"SHOAL_TIMEOUT": "60"}, timeout=300)
    assert proc.stdout.count("done") == 4
