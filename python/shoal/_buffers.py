"""Turning user buffers into (address, bytes) pairs the core can use without copying.

Any C-contiguous buffer works: numpy arrays, bytearrays, memoryviews, and
anything exposing the buffer protocol. bfloat16 has no numpy dtype, so it is
passed as a 2-byte buffer (e.g. uint16) with ``dtype="bfloat16"``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from shoal import _shoal
from shoal._types import DTypeName

# The element types come from the Rust core (`_shoal.dtypes()`: name, bytes
# per element, numpy's name or None), so this list cannot drift from it.
_CORE_DTYPES = _shoal.dtypes()

SUPPORTED_DTYPES: tuple[DTypeName, ...] = tuple(cast(DTypeName, name) for name, _, _ in _CORE_DTYPES)

# dtype objects -> names; a dict lookup is much cheaper than `dtype.name`
_NAMES: dict[np.dtype[Any], DTypeName] = {
    np.dtype(numpy): cast(DTypeName, name) for name, _, numpy in _CORE_DTYPES if numpy is not None
}
_ITEMSIZES: dict[str, int] = {name: size for name, size, _ in _CORE_DTYPES}

_ALIASES: dict[str, DTypeName] = {"float": "float32", "double": "float64", "half": "float16", "bf16": "bfloat16"}


def as_array(buf: Any, name: str, writable: bool) -> np.ndarray[Any, Any]:
    """A numpy view of ``buf`` sharing its memory; rejects what cannot be used in place."""
    if isinstance(buf, np.ndarray):
        arr = buf
    else:
        try:
            view = memoryview(buf)
        except TypeError:
            raise TypeError(
                f"{name} must be a numpy array or support the buffer protocol, got {type(buf).__name__}"
            ) from None
        if not view.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        arr = np.asarray(view)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{name} is read-only; pass a writable buffer")
    return arr


def dtype_name(arr: np.ndarray[Any, Any], override: str | None) -> DTypeName:
    """The shoal dtype name of ``arr``, or the explicit ``override`` (needed for bfloat16)."""
    if override is not None:
        name = _ALIASES.get(override, override)
        if name not in _ITEMSIZES:
            raise ValueError(f"unsupported dtype {override!r}; supported: {', '.join(SUPPORTED_DTYPES)}")
        itemsize = _ITEMSIZES[name]
        if arr.itemsize != itemsize and arr.nbytes % itemsize:
            raise ValueError(f"buffer of {arr.nbytes} bytes is not a whole number of {name} elements")
        return cast(DTypeName, name)
    found = _NAMES.get(arr.dtype)
    if found is None:
        raise ValueError(f"unsupported dtype {arr.dtype.name!r}; supported: {', '.join(SUPPORTED_DTYPES)}")
    return found


def itemsize(dtype: str) -> int:
    """Bytes per element of a supported dtype name."""
    return _ITEMSIZES[dtype]


def typed_view(buf: Any, name: str, writable: bool, dtype: str | None) -> tuple[np.ndarray[Any, Any], DTypeName, int]:
    """``buf`` as an array sharing its memory, its shoal dtype name and its element count."""
    arr = as_array(buf, name, writable)
    dt = dtype_name(arr, dtype)
    return arr, dt, arr.nbytes // _ITEMSIZES[dt]
