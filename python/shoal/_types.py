"""The types of the public API's arguments: buffers, and the names it accepts as strings.

The name lists are checked against the Rust core by tests/test_typing.py
(``_shoal.dtypes()``, ``_shoal.algorithms()``), so an op or dtype added there
without adding it here fails a test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol, Union

if TYPE_CHECKING:  # numpy is imported where buffers are handled, not for these names
    import numpy as np


class SupportsBuffer(Protocol):
    """An object that exports its memory through the buffer protocol: bytearray,
    memoryview, mmap, array.array... (``collections.abc.Buffer`` from Python 3.12)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...


# numpy declares ndarray.__buffer__ only for Python >= 3.12, hence named here.
Buffer = Union["np.ndarray[Any, Any]", SupportsBuffer]
"""A numpy array or any other buffer-protocol object (C-contiguous; writable for outputs)."""


ReduceOpName = Literal["sum", "prod", "min", "max", "avg", "band", "bor", "bxor"]
"""Reduction ops: ``avg`` needs a floating-point dtype; ``band``, ``bor`` and ``bxor`` an integer one."""

DTypeName = Literal["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"]
"""Element types: numpy's names, plus ``bfloat16`` (a 2-byte buffer passed with ``dtype="bfloat16"``)."""

DTypeAlias = Literal["float", "double", "half", "bf16"]
"""Other names the collectives' ``dtype=`` accepts: float32, float64, float16 and bfloat16."""

CollectiveName = Literal[
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "gather", "scatter", "barrier"
]
"""The collectives, as ``shoal.algorithms`` and ``Group.choose_algorithm`` name them."""
