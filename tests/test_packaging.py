"""Packaging: the metadata says what the wheel is, and the wheel is what it says.

The metadata checks are instant. Building and installing a wheel takes about
half a minute (longer where maturin is not cached), so it runs where
TEST_SHOAL_WHEEL=1 (scripts/test.sh sets it); TEST_SHOAL_PYTHONS, a list of
interpreters separated by ':', additionally installs the wheel into a fresh
virtual environment of each and runs a 2-rank job there (this needs numpy
from the package index).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import shoal
from shoal import _shoal

ROOT = Path(__file__).parent.parent
DEMO = ROOT / "examples" / "demo.py"

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    tomllib = pytest.importorskip("tomli")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_extension_is_built_for_the_stable_abi() -> None:
    # One abi3 build serves every CPython >= 3.9; a version-specific build
    # (say, a stale _shoal.cpython-311-*.so) would shadow it on import.
    assert Path(_shoal.__file__).name == "_shoal.abi3.so"
    cargo = (ROOT / "crates" / "shoal-py" / "Cargo.toml").read_text()
    assert re.search(r'^pyo3 = .*"abi3-py39"', cargo, re.M)


def test_classifiers_match_requires_python_and_platform() -> None:
    project = pyproject()["project"]
    assert project["requires-python"] == ">=3.9"
    classifiers = set(project["classifiers"])
    assert "Operating System :: POSIX :: Linux" in classifiers
    minor = re.compile(r"Programming Language :: Python :: (3\.\d+)")
    versions = {m[1] for m in map(minor.fullmatch, classifiers) if m}
    assert versions == {"3.9", "3.10", "3.11", "3.12", "3.13"}
    assert "Linux only" in project["description"] and "Rust" in project["description"]
    assert project["version"] == shoal.__version__


def test_extras_split_torch_from_examples() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    assert any(re.fullmatch(r"torch>=2\.4(,.*)?", r) for r in extras["torch"]), extras["torch"]
    assert not {"torchvision", "scikit-learn"} & set(extras["torch"])
    assert {"shoal[torch]", "torchvision", "scikit-learn"} <= set(extras["examples"])


def build_wheel(out: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "wheel", str(ROOT), "-w", str(out), "--no-deps", "-q"]
    subprocess.run(cmd, check=True, timeout=900)
    (wheel,) = out.glob("shoal-*.whl")
    return wheel


def smoke(python: str, env: dict[str, str]) -> None:
    """A 2-rank job through `shoal run` with this interpreter and environment."""
    cmd = [python, "-m", "shoal.cli", "run", "-n", "2", "--", python, str(DEMO)]
    proc = subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "world of 2" in proc.stdout


@pytest.mark.skipif(os.environ.get("TEST_SHOAL_WHEEL") != "1", reason="builds a wheel: set TEST_SHOAL_WHEEL=1")
def test_wheel_is_abi3_manylinux_and_installs(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    assert re.fullmatch(r"shoal-[\d.]+-cp39-abi3-manylinux_2_\d+_[a-z0-9_]+\.whl", wheel.name), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert {"shoal/_shoal.abi3.so", "shoal/py.typed", "shoal/_shoal.pyi"} <= set(names)

    # Into a bare directory, run by this interpreter (its numpy, the wheel's shoal).
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)]
    subprocess.run(install, check=True)
    smoke(sys.executable, {**os.environ, "PYTHONPATH": str(target)})

    for python in filter(None, os.environ.get("TEST_SHOAL_PYTHONS", "").split(":")):
        venv = tmp_path / f"venv-{Path(python).parent.parent.name}"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, timeout=600)
        outside = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        smoke(str(venv / "bin" / "python"), outside)
