"""SHOAL_ALGORITHMS: Python files or modules of algorithms that every process
loads when it imports shoal, so programs that do not import them (``shoal
bench``'s workers, a launcher's ranks) can still run them by name."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path


def load_from_env() -> None:
    """Loads every file or module SHOAL_ALGORITHMS names (comma-separated)."""
    spec = os.environ.get("SHOAL_ALGORITHMS", "")
    for item in (s.strip() for s in spec.split(",")):
        if item:
            load(item)


def load(item: str) -> None:
    """Imports a module by name, or runs a ``.py`` file as a module (once)."""
    if not item.endswith(".py"):
        importlib.import_module(item)
        return
    path = Path(item).resolve()
    if not path.is_file():
        raise ImportError(f"SHOAL_ALGORITHMS: no such file {item!r}")
    name = f"shoal_algorithms.{path.stem}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"SHOAL_ALGORITHMS: cannot load {item!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
