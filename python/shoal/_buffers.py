"""Turning user buffers into (address, bytes) pairs the core can use without copying.

Any C-contiguous buffer works: numpy arrays, bytearrays, memoryviews, and
anything exposing the buffer protocol. bfloat16 has no numpy dtype, so it is
passed as a 2-byte buffer (e.g. uint16) with ``dtype="bfloat16"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SUPPORTED_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")

# dtype objects -> names; a dict lookup is much cheaper than `dtype.name`
_NAMES = {np.dtype(n): n for n in SUPPORTED_DTYPES if n != "bfloat16"}
_ITEMSIZES = {n: (2 if n == "bfloat16" else np.dtype(n).itemsize) for n in SUPPORTED_DTYPES}

_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "bf16": "bfloat16"}


def as_array(buf: Any, name: str, writable: bool) -> np.ndarray:
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


def dtype_name(arr: np.ndarray, override: str | None) -> str:
    """The shoal dtype name of ``arr``, or the explicit ``override`` (needed for bfloat16)."""
    if override is not None:
        name = _ALIASES.get(override, override)
        if name not in SUPPORTED_DTYPES:
            raise ValueError(f"unsupported dtype {override!r}; supported: {', '.join(SUPPORTED_DTYPES)}")
        itemsize = 2 if name == "bfloat16" else np.dtype(name).itemsize
        if arr.itemsize != itemsize and arr.nbytes % itemsize:
            raise ValueError(f"buffer of {arr.nbytes} bytes is not a whole number of {name} elements")
        return name
    name = _NAMES.get(arr.dtype)
    if name is None:
        name = arr.dtype.name
        raise ValueError(f"unsupported dtype {name!r}; supported: {', '.join(SUPPORTED_DTYPES)}")
    return name


def itemsize(dtype: str) -> int:
    return _ITEMSIZES[dtype]


def typed_view(buf: Any, name: str, writable: bool, dtype: str | None) -> tuple[np.ndarray, str, int]:
    """``buf`` as an array sharing its memory, its shoal dtype name and its element count."""
    arr = as_array(buf, name, writable)
    dt = dtype_name(arr, dtype)
    return arr, dt, arr.nbytes // _ITEMSIZES[dt]
