"""The package's types: the stub matches the extension, the Literal name lists match
the Rust core, the errors are shoal's, and every public callable is documented
with real types."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

import shoal
from shoal import _buffers, _shoal
from shoal._types import CollectiveName, DTypeAlias, DTypeName, ReduceOpName

PACKAGE = Path(shoal.__file__).parent
ERRORS = ["AbortedError", "MismatchError", "PeerDiedError", "ShoalError", "ShoalTimeoutError"]


def test_package_is_marked_typed_and_stubbed() -> None:
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_shoal.pyi").is_file()


def test_stub_names_what_the_extension_defines() -> None:
    stub = ast.parse((PACKAGE / "_shoal.pyi").read_text())
    in_stub = {n.name for n in stub.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assert in_stub == {n for n in dir(_shoal) if not n.startswith("__")}
    for cls in stub.body:
        if isinstance(cls, ast.ClassDef) and cls.name in ("Communicator", "Work"):
            methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
            runtime = {n for n in dir(getattr(_shoal, cls.name)) if not n.startswith("_")}
            assert methods == runtime, cls.name


def test_errors_are_importable_from_shoal_and_named_so() -> None:
    for name in ERRORS:
        error = getattr(shoal, name)
        assert error is getattr(_shoal, name) and name in shoal.__all__
        assert error.__module__ == "shoal"
    assert issubclass(shoal.MismatchError, shoal.ShoalError) and issubclass(shoal.ShoalError, RuntimeError)
    assert issubclass(shoal.ShoalTimeoutError, TimeoutError)


def test_dtype_tables_come_from_the_core() -> None:
    core = _shoal.dtypes()
    assert [name for name, _, _ in core] == list(_buffers.SUPPORTED_DTYPES)
    for name, size, numpy_name in core:
        assert _buffers.itemsize(name) == size
        if numpy_name is not None:
            assert np.dtype(numpy_name).itemsize == size
            assert _buffers.dtype_name(np.zeros(1, numpy_name), None) == name
    assert list(get_args(DTypeName)) == [name for name, _, _ in core]
    assert set(get_args(DTypeAlias)) == set(_buffers._ALIASES)


def core_names(message: str) -> list[str]:
    """The names a core error message lists after 'valid: '."""
    return re.search(r"valid: (.*)$", message)[1].split(", ")


def test_collective_names_are_the_cores() -> None:
    with pytest.raises(ValueError) as e:
        _shoal.algorithms("no-such-collective")  # type: ignore[arg-type]
    assert list(get_args(CollectiveName)) == core_names(str(e.value))


def test_reduce_op_names_are_the_cores() -> None:
    # a bad op is rejected by the core, which lists the valid ones (single-rank job)
    script = "import numpy as np, shoal\nshoal.init()\nshoal.allreduce(np.ones(2), op='no-such-op')\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "ValueError" in proc.stderr, proc.stderr
    assert list(get_args(ReduceOpName)) == core_names(proc.stderr.strip().splitlines()[-1])


def public_callables() -> list[tuple[str, object]]:
    found = [(name, getattr(shoal, name)) for name in shoal.__all__ if inspect.isfunction(getattr(shoal, name))]
    for cls in (shoal.Group, shoal.Work):
        for name, member in vars(cls).items():
            if not name.startswith("_"):
                found.append((f"{cls.__name__}.{name}", member.fget if isinstance(member, property) else member))
    return found


@pytest.mark.parametrize("name,func", public_callables(), ids=lambda v: v if isinstance(v, str) else "")
def test_public_callables_are_documented_with_real_types(name: str, func: object) -> None:
    assert inspect.getdoc(func), f"{name} has no docstring"
    annotations = dict(getattr(func, "__annotations__", {}))
    assert "return" in annotations, f"{name} has no return annotation"
    assert not [a for a in annotations.values() if re.search(r"\bAny\b", str(a))], f"{name}: {annotations}"
