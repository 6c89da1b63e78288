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
import re
import sys
from pathlib import Path
from typing import Any

#: A rank's trace file name.
RANK_FILE = re.compile(r"rank-(\d+)\.json")

Event = dict[str, Any]


class TraceError(ValueError):
    """A trace directory or file that cannot be merged, with the reason."""


def load_rank(path: Path) -> list[Event]:
    """The events of one rank's file. A rank that died mid-write leaves a
    file cut short after its last complete line: that much is read."""
    text = path.read_text()
    try:
        events = json.loads(text)
    except json.JSONDecodeError:
        lines = [line.rstrip().rstrip(",") for line in text.splitlines()]
        events = []
        for line in lines:
            line = line.lstrip("[").rstrip("]")
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                break  # the torn last line
    if not isinstance(events, list) or not events:
        raise TraceError(f"{path}: not a shoal trace (expected a JSON array of trace events)")
    return events


def clock_offset_us(events: list[Event], path: Path) -> float:
    """Microseconds to add to this rank's times to get rank 0's."""
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "shoal_clock":
            return float(e["args"]["offset_ns"]) / 1000.0
    raise TraceError(f"{path}: no shoal_clock metadata event (not written by SHOAL_TRACE?)")


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
        for e in events:
            if "ts" in e:
                e = {**e, "ts": round(float(e["ts"]) + offset, 3)}
            merged.append(e)
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
    try:
        job = merge(ns.directory)
    except (TraceError, OSError) as e:
        print(f"shoal trace merge: {e}", file=sys.stderr)
        return 1
    out = ns.output or ns.directory / "job.json"
    out.write_text(json.dumps(job))
    ranks = len(job["metadata"]["shoal_clock_offsets_us"])
    print(f"merged {ranks} rank(s), {len(job['traceEvents'])} events -> {out}")
    return 0
