"""Large shared-memory messages read in place, split between the two ranks
(the receiver reads the first half, its sender writes the second:
SHOAL_SHM_SPLIT_BYTES) or not: every byte arrives, for several world sizes,
dtypes, algorithms and odd sizes. The transport's own tests
(crates/shoal-transport/tests/cma.rs) check that the halves are written."""

from __future__ import annotations

import pytest
from conftest import launch


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("split", ["1048576", "0"])
def test_large_copies_arrive_whole_split_or_not(world: int, split: str) -> None:
    env = {"SHOAL_TRANSPORT": "shm", "SHOAL_SHM_SPLIT_BYTES": split, "SHOAL_TIMEOUT": "60"}
    proc = launch(world, "split_copies.py", env=env, timeout=300)
    assert proc.stdout.count("done") == world, proc.stdout[-2000:]
