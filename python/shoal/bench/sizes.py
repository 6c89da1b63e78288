"""Message sizes: ``8:64M`` (powers of two), ``1K,4K,1M`` (a list), or both mixed.

Suffixes K, M and G are binary (1K = 1024 bytes); a trailing ``B`` (``64KB``,
``64KiB``) is accepted. ``A:B`` gives every power of two from A to B when A is
a power of two, else A, 2A, 4A, ... up to B; ``A:B:F`` multiplies by F
(``A:B:+S`` adds S) instead of doubling.
"""

from __future__ import annotations

import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.I)


def parse_size(text: str) -> int:
    """``64K`` -> 65536; raises ValueError on anything else."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a size (e.g. 8, 64K, 16M, 1G)")
    value = int(m[1]) * _UNITS[m[2].upper()]
    if value <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return value


def parse_sizes(text: str) -> list[int]:
    """All sizes of a comma-separated list of sizes and ranges, sorted, without repeats."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        pieces = part.split(":")
        if len(pieces) == 1:
            out.add(parse_size(pieces[0]))
            continue
        if len(pieces) not in (2, 3):
            raise ValueError(f"{part!r} is not a range (A:B or A:B:FACTOR)")
        lo, hi = parse_size(pieces[0]), parse_size(pieces[1])
        if lo > hi:
            raise ValueError(f"range {part!r} goes down ({lo} > {hi})")
        step = pieces[2].strip() if len(pieces) == 3 else "2"
        if step.startswith("+"):
            inc = parse_size(step[1:])
            out.update(range(lo, hi + 1, inc))
            continue
        factor = int(step)
        if factor < 2:
            raise ValueError(f"range factor must be at least 2, got {factor}")
        size = lo
        while size <= hi:
            out.add(size)
            size *= factor
    if not out:
        raise ValueError(f"no sizes in {text!r}")
    return sorted(out)


def human(nbytes: int) -> str:
    """65536 -> '64 KiB'; sizes that are not whole units stay in bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"
