"""Reading the files a user names (a trace, a tuning result, a plan document):
regular files only, and only up to a limit. Read naively, ``/dev/zero`` fills
memory and a FIFO blocks in ``open`` until a writer comes, which may be never.
The Rust side does the same for its files (``shoal_bootstrap::small_file``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MiB = 1 << 20


class UnreadableFile(ValueError):
    """A file that is not a regular file, or larger than its limit. The
    message says which, not the file's name: the caller names it."""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    OSError if it cannot be read (missing, no permission), UnreadableFile if it
    is not a regular file or is too large."""
    _check(os.stat(path), limit)  # before opening: opening a FIFO waits for a writer
    # O_NONBLOCK: a FIFO put in the file's place since cannot block the open
    # either (regular files ignore the flag).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        _check(os.fstat(fd), limit)
        data = f.read(limit + 1)
    if len(data) > limit:  # it grew meanwhile
        raise UnreadableFile(f"it is more than the {limit} bytes allowed")
    return data


def _check(st: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(f"it is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise UnreadableFile(f"it is {st.st_size} bytes, more than the {limit} allowed")


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages."""
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "a special file")
