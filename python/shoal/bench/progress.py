"""A dependency-free progress bar on stderr.

On a terminal it redraws one line (``\\r``); otherwise (logs, CI) it prints a
line whenever a job starts or ends, so the output stays readable.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None, width: int = 28) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.width = width
        self.start = time.monotonic()
        self.label = ""
        self._last_len = 0

    def _elapsed(self) -> str:
        s = int(time.monotonic() - self.start)
        return f"{s // 60}:{s % 60:02d}"

    def bar(self) -> str:
        frac = min(self.done / self.total, 1.0)
        filled = int(round(frac * self.width))
        return (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {frac * 100:3.0f}% "
            f"{self.done}/{self.total} {self._elapsed()} {self.label}"
        )

    def _draw(self) -> None:
        if not self.tty:
            return
        text = self.bar()
        pad = max(self._last_len - len(text), 0)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._last_len = len(text)

    def note(self, message: str) -> None:
        """A line of its own (a job starting or ending), above the bar."""
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + " " * self._last_len + "\r")
            self.stream.write(message + "\n")
            self._draw()
        else:
            self.stream.write(f"{self.bar()}  {message}\n")
        self.stream.flush()

    def set_label(self, label: str) -> None:
        self.label = label
        self._draw()

    def advance(self, steps: int = 1, label: str | None = None) -> None:
        self.done += steps
        if label is not None:
            self.label = label
        self._draw()

    def finish(self) -> None:
        self.done = self.total
        if self.tty:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
