"""Calls a careless user can make, on real jobs: async calls whose handles are
dropped, in-place and overlapping buffers, bad ranks, roots and tags, bad
SHOAL_* values, and many distinct call shapes (the plan cache)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import init_with, launch


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_async_calls_own_their_buffers(transport: str) -> None:
    """Dropping the handle of a call in flight (or its wait timing out) must
    neither crash nor let the call write into memory that was freed."""
    proc = launch(2, "call_safety.py", "ownership", env={"SHOAL_TRANSPORT": transport}, timeout=120)
    assert proc.stdout.count("OK ownership") == 2


@pytest.mark.parametrize(("transport", "world"), [("shm", 2), ("tcp", 2), ("shm", 4)])
def test_in_place_forms_are_correct_and_overlaps_refused(transport: str, world: int) -> None:
    proc = launch(world, "call_safety.py", "aliasing", env={"SHOAL_TRANSPORT": transport}, timeout=120)
    assert proc.stdout.count("OK aliasing") == world


def test_bad_ranks_roots_and_tags_are_value_errors() -> None:
    proc = launch(2, "call_safety.py", "arguments", timeout=120)
    assert proc.stdout.count("OK arguments") == 2


def test_plan_cache_is_bounded() -> None:
    proc = launch(2, "call_safety.py", "plan_cache", "5000", env={"SHOAL_TRANSPORT": "shm"}, timeout=120)
    assert proc.stdout.count("OK plan_cache") == 2, proc.stdout


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        ("SHOAL_TIMEOUT", "-1", "positive"),
        ("SHOAL_TIMEOUT", "0", "positive"),
        ("SHOAL_TIMEOUT", "nan", "positive"),
        ("SHOAL_TIMEOUT", "inf", "at most"),
        ("SHOAL_TIMEOUT", "1e300", "at most"),
        ("SHOAL_TIMEOUT", "soon", "number"),
        ("SHOAL_CHUNK_BYTES", "0", "at least 64"),
        ("SHOAL_CHUNK_BYTES", "-5", "number"),
        ("SHOAL_SHM_RING_BYTES", "100", "at least 4096"),
        ("SHOAL_SHM_RING_BYTES", "1e9", "number"),
        ("SHOAL_SHM_CMA_BYTES", "-1", "number"),
        ("SHOAL_CALIBRATE", "2", "0 or 1"),
        ("SHOAL_CALIBRATE", "maybe", "0 or 1"),
        ("SHOAL_TCP_ADDR", "not-an-ip", "IP address"),
        ("SHOAL_COST", "alpha=nan", "alpha"),
        ("SHOAL_COST", "beta=-1", "beta"),
        ("SHOAL_COST", "beta_read=inf", "beta_read"),
        ("SHOAL_PLAN_CACHE", "0", "at least 1"),
        ("SHOAL_PLAN_CACHE", "many", "number"),
    ],
)
def test_bad_configuration_is_a_clear_error_at_init(name: str, value: str, hint: str) -> None:
    proc = init_with({name: value})
    assert proc.returncode != 0 and "initialised" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError:"), proc.stderr
    assert name in last and value in last and hint in last, last
    assert "panicked" not in proc.stderr and "PanicException" not in proc.stderr, proc.stderr


def test_good_configuration_is_accepted() -> None:
    proc = init_with(
        {
            "SHOAL_TIMEOUT": "0.5",
            "SHOAL_CHUNK_BYTES": "64",
            "SHOAL_SHM_RING_BYTES": "65536",
            "SHOAL_SHM_CMA_BYTES": "0",
            "SHOAL_CALIBRATE": "0",
            "SHOAL_TCP_ADDR": "127.0.0.1",
            "SHOAL_COST": "alpha=1e-6, beta=0, beta_read=1e-10",
            "SHOAL_PLAN_CACHE": "8",
        }
    )
    assert proc.returncode == 0, proc.stderr
    assert "initialised" in proc.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [("rank=-1, world_size=2", "rank=-1"), ("rank=2, world_size=2", "rank=2"), ("world_size=0", "world_size=0")],
)
def test_bad_init_arguments_are_value_errors(args: str, named: str) -> None:
    code = f"import shoal\ntry:\n    shoal.init({args})\nexcept ValueError as e:\n    print('ValueError', e)"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_"))}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("ValueError") and named in proc.stdout, proc.stdout + proc.stderr
