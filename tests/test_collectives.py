"""Every collective x algorithm over shm and tcp, world sizes 1..8, all
dtypes and ops, counts 0, 1, 7 and about a million, checked against numpy."""

from __future__ import annotations

import pytest
from conftest import launch

WORLDS = [1, 2, 3, 4, 5, 8]


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", WORLDS)
def test_every_collective_and_algorithm(transport: str, world: int) -> None:
    # the million-element cases are the slow part; 8 ranks on 2 cores get a smaller "big" count
    big = "1048583" if world <= 4 else "262147"
    proc = launch(world, "collectives.py", env={"SHOAL_TRANSPORT": transport, "BIG_COUNT": big}, timeout=900)
    assert proc.stdout.count("OK ") == world, proc.stdout[-2000:]
