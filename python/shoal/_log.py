"""Rust's log records in Python's ``logging``, under the ``shoal`` logger.

shoal's Rust code logs through ``tracing``; ``SHOAL_LOG`` decides which
records it makes (default: warnings), ``SHOAL_LOG_FILE`` sends its lines to
a file. Importing ``shoal`` starts one daemon thread here that takes the
records and hands them to ``logging``: target ``shoal_core::ina`` becomes
logger ``shoal.core.ina``, and each record carries ``record.rank`` (None in
the switch daemon). Python's levels and handlers then decide what is shown:
to see shoal's info records, set ``SHOAL_LOG=info`` *and* let the ``shoal``
logger pass INFO. When no handler would receive a record (logging is not
configured), its line goes to stderr as it would without Python, unless the
log file already has it.

Why a thread that takes records rather than Rust calling ``logging``: Rust
logs from its own threads (the async worker, TCP readers), and a Rust
thread that waited for the GIL while the thread holding it waited for that
Rust thread would deadlock the process. So Rust never takes the GIL to log:
it queues the record (a bounded queue; when full, Rust writes the line to
stderr itself) and this thread waits for records with the GIL released.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading

from shoal import _shoal

#: Seconds a wait for records lasts before the thread looks again (it is also
#: woken at exit).
_WAIT = 5.0

_Record = tuple[int, str, str, str, float, bool, "int | None"]


def logger_name(target: str) -> str:
    """The Python logger of a Rust target: ``shoal_core::ina`` -> ``shoal.core.ina``."""
    path = target.replace("::", ".")
    return "shoal." + (path[len("shoal_") :] if path.startswith("shoal_") else path)


def _deliver(records: list[_Record]) -> None:
    for level, target, message, line, created, written, rank in records:
        logger = logging.getLogger(logger_name(target))
        if logger.hasHandlers():
            if logger.isEnabledFor(level):
                record = logger.makeRecord(logger.name, level, target, 0, message, (), None, extra={"rank": rank})
                record.created, record.msecs = created, (created % 1) * 1000
                logger.handle(record)
        elif not written and sys.stderr is not None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def _pump() -> None:
    while (records := _shoal._log_take(_WAIT)) is not None:
        _deliver(records)


_pumping = threading.Thread(target=_pump, name="shoal-log", daemon=True)


def _stop() -> None:
    """At exit: stop queueing, let the thread finish its batch, deliver the rest."""
    rest = _shoal._log_detach()
    _pumping.join(timeout=2)
    _deliver(rest)


_shoal._log_attach()
_pumping.start()
atexit.register(_stop)
