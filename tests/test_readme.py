"""The README's API tour runs as written, on 1, 2 and 3 ranks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"


def tour_code() -> str:
    text = README.read_text()
    section = text.split("## API tour", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_api_tour_runs(world: int, tmp_path: Path) -> None:
    script = tmp_path / "tour.py"
    script.write_text(tour_code() + "\nprint('TOUR DONE')\n")
    cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", str(world), "--", sys.executable, str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("TOUR DONE") == world
