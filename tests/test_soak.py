"""A mixed soak (every collective, dtype and op; sync and async; world and
sub-groups), bit for bit against numpy, with memory, fds, threads and
/dev/shm entries checked flat. CI runs a short one per transport; the full
10k-call soak is `shoal run -n 4 python tests/workers/soak.py 10000`."""

from __future__ import annotations

import json

import pytest
from conftest import launch


@pytest.mark.parametrize("transport,ranks", [("shm", 4), ("tcp", 3)])
def test_mixed_soak_is_exact_and_flat(transport: str, ranks: int) -> None:
    # 1500 calls do not let the caches settle (the 10k soak checks 8 MiB over
    # its second half); this limit still catches a leaked buffer per call.
    env = {"SHOAL_TRANSPORT": transport, "SHOAL_TIMEOUT": "60", "SOAK_RSS_LIMIT": str(48 << 20)}
    proc = launch(ranks, "soak.py", "1500", env=env)
    reports = [json.loads(line.split(":", 1)[1]) for line in proc.stdout.splitlines() if '"calls"' in line]
    assert sorted(r["rank"] for r in reports) == list(range(ranks))
    for r in reports:
        assert r["end"]["threads"] == r["warm"]["threads"], r
        assert r["end"]["fds"] == r["warm"]["fds"], r
