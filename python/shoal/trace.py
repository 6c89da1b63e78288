"""``shoal trace merge DIR -o job.json``: the per-rank traces that
``SHOAL_TRACE=DIR`` writes (``rank-<r>.json``) on one timeline.

Each rank's times count from its own start; its ``shoal_clock`` metadata
event carries the offset to rank 0's clock measured at init, which merging
adds, so that a send on one rank and the receive it meets on another line
up. The result is one Chrome/Perfetto trace (open it at ui.perfetto.dev or
chrome://tracing). See docs/tracing.md.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from shoal._files import MiB, UnreadableFile, read_regular

#: A rank's trace file name.
RANK_FILE = re.compile(r"rank-(\d+)\.json")

#: The largest rank file merged: merging holds every event in memory.
MAX_RANK_FILE_BYTES = 1024 * MiB

Event = dict[str, Any]


class TraceError(ValueError):
    """A trace directory or file that cannot be merged, with the reason."""


def load_rank(path: Path) -> list[Event]:
    """The events of one rank's file. A rank that died mid-write leaves a
    file cut short after its last complete line: that much is read."""
    try:
        text = read_regular(path, MAX_RANK_FILE_BYTES).decode()
    except UnreadableFile as e:
        raise TraceError(f"{path}: {e}") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not a shoal trace (not UTF-8 text at byte {e.start})") from None
    events = _parse_events(text)
    if not isinstance(events, list) or not events or not all(isinstance(e, dict) for e in events):
        raise TraceError(f"{path}: not a shoal trace (expected a JSON array of trace events)")
    return events


def _parse_events(text: str) -> Any:
    """The JSON array in ``text``, or the events of its complete lines (a torn file)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: absurdly nested input
        pass
    events = []
    for line in text.splitlines():
        line = line.rstrip().rstrip(",").lstrip("[").rstrip("]")
        if not line:
            continue
        try:
            events.append(json.loads(line))
        except (ValueError, RecursionError):
            break  # the torn last line
    return events


def _number(value: Any) -> float | None:
    """``value`` as a finite float, if it is a JSON number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def clock_offset_us(events: list[Event], path: Path) -> float:
    """Microseconds to add to this rank's times to get rank 0's."""
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "shoal_clock":
            args = e.get("args")
            offset = _number(args.get("offset_ns")) if isinstance(args, dict) else None
            if offset is None:
                raise TraceError(f"{path}: its shoal_clock event has no numeric args.offset_ns")
            return offset / 1000.0
    raise TraceError(f"{path}: no shoal_clock metadata event (not written by SHOAL_TRACE?)")


def shifted(events: list[Event], offset: float, path: Path) -> list[Event]:
    """``events`` with ``offset`` microseconds added to their times."""
    out = []
    for i, e in enumerate(events):
        if "ts" in e:
            ts = _number(e["ts"])
            if ts is None:
                raise TraceError(f"{path}: event {i} has a ts that is not a number")
            e = {**e, "ts": round(ts + offset, 3)}
        out.append(e)
    return out


def rank_files(directory: Path) -> dict[int, Path]:
    """rank -> its trace file in `directory`."""
    if not directory.is_dir():
        raise TraceError(f"{directory}: not a directory")
    files = {}
    for p in directory.iterdir():
        m = RANK_FILE.fullmatch(p.name)
        if m:
            files[int(m.group(1))] = p
    if not files:
        raise TraceError(f"{directory}: no rank-<r>.json files (was the job run with SHOAL_TRACE={directory}?)")
    return dict(sorted(files.items()))


def merge(directory: Path) -> dict[str, Any]:
    """Every rank's events on rank 0's clock, as one trace object."""
    merged: list[Event] = []
    offsets: dict[str, float] = {}
    for rank, path in rank_files(directory).items():
        events = load_rank(path)
        offset = clock_offset_us(events, path)
        offsets[str(rank)] = offset
        merged += shifted(events, offset, path)
    return {
        "traceEvents": merged,
        "displayTimeUnit": "ns",
        "metadata": {"shoal_clock_offsets_us": offsets},
    }


def main(argv: list[str]) -> int:
    """`shoal trace merge DIR [-o FILE]`; returns the exit code."""
    p = argparse.ArgumentParser(prog="shoal trace", description="Work with the traces SHOAL_TRACE=DIR writes.")
    sub = p.add_subparsers(dest="action", required=True)
    m = sub.add_parser("merge", help="merge the ranks' traces into one timeline (clocks aligned to rank 0)")
    m.add_argument("directory", type=Path, help="the SHOAL_TRACE directory")
    m.add_argument("-o", "--output", type=Path, help="the merged trace (default: DIR/job.json)")
    try:
        ns = p.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2
    out = ns.output or ns.directory / "job.json"
    try:
        job = merge(ns.directory)
        out.write_text(json.dumps(job))
    except (TraceError, OSError) as e:
        print(f"shoal trace merge: {e}", file=sys.stderr)
        return 1
    ranks = len(job["metadata"]["shoal_clock_offsets_us"])
    print(f"merged {ranks} rank(s), {len(job['traceEvents'])} events -> {out}")
    return 0
