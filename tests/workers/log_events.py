"""Makes shoal log: init, allreduces, finalize. argv[1] is the mode:

- ``calls``: one allreduce with algorithm="ring" (SHOAL_LOG decides what shows);
- ``python``: Python logging configured first; prints each record of the
  ``shoal`` loggers it receives as ``PYLOG <logger> <level> <rank> <message>``;
- ``ina``: one allreduce through the switch (SHOAL_SWITCH);
- ``twice``: init, two allreduces through the switch, finalize, then all of it
  again in the same process (a switch that cannot be used warns once)."""

from __future__ import annotations

import logging
import sys
import time

import numpy as np

import shoal


class Collect(logging.Handler):
    """Keeps every record it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def run_job(algorithm: str, calls: int) -> None:
    shoal.init()
    x = np.ones(1000, dtype=np.float32)
    for _ in range(calls):
        shoal.allreduce(x, algorithm=algorithm)
    assert x[0] == shoal.size() ** calls
    shoal.finalize()


def python_logging() -> None:
    collect = Collect()
    logging.basicConfig(level=logging.DEBUG, handlers=[collect])
    run_job("ring", 1)
    deadline = time.monotonic() + 10
    while not any("allreduce runs ring" in r.getMessage() for r in collect.records):
        if time.monotonic() > deadline:
            raise AssertionError(f"no record of the call reached Python logging: {collect.records}")
        time.sleep(0.01)
    for r in collect.records:
        if r.name.startswith("shoal"):
            print(f"PYLOG {r.name} {r.levelname} {getattr(r, 'rank', '-')} {r.getMessage()}", flush=True)


def main() -> None:
    mode = sys.argv[1]
    if mode == "calls":
        run_job("ring", 1)
    elif mode == "python":
        python_logging()
    elif mode == "ina":
        run_job("ina", 1)
    elif mode == "twice":
        run_job("ina", 2)
        run_job("ina", 2)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(f"OK log {mode}", flush=True)


if __name__ == "__main__":
    main()
