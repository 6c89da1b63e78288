"""Helpers for tests that launch real processes through `shoal run`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKERS = HERE / "workers"


def launch(n: int, script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 240,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs `script` (a file under tests/workers) on n ranks with the real launcher."""
    full_env = {**os.environ, **(env or {})}
    cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", str(n), "--", sys.executable, str(WORKERS / script), *args]
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\n"
                    f"stderr:\n{proc.stderr[-6000:]}")
    return proc
