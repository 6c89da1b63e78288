"""``shoal tune``: measure every candidate algorithm on this machine and write
a tuning table (docs/tuning.md) with the fastest one per size range.

    shoal tune -n 2,4 --out my-machine.txt
    SHOAL_TUNE_FILE=my-machine.txt python train.py

For each rank count one ``shoal run`` job measures, per collective and size,
every algorithm the selector could choose (``shoal.algorithms()`` at run
time: the built-in registry and Python algorithms loaded through
``SHOAL_ALGORITHMS``), with the timing loop of ``shoal bench``
(:mod:`shoal.bench.worker`): per repeat a barrier and ``iters`` back-to-back
calls, the slowest rank's time, the median over repeats. The algorithms of
one size are measured side by side, repeat by repeat, so load that drifts
during the run weighs on all of them alike. Each result is checked once
against numpy; an algorithm with wrong results never wins.

The table gets one row per collective and rank count, limited to this
machine class (``cpus=``), adjacent sizes with the same winner merged and a
boundary halfway (geometrically) between measured sizes with different
winners. The raw measurements go to a JSON file beside it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shoal._files import MiB, read_regular
from shoal.bench import check
from shoal.bench.progress import Progress
from shoal.bench.runners import base_env, python, run_job, shoal_run_argv
from shoal.bench.sizes import human, parse_sizes
from shoal.bench.worker import auto_iters, auto_warmup

COLLECTIVES = ("allreduce", "broadcast", "allgather", "reduce_scatter")
#: 8 B, then powers of 4 from 64 B to 64 MiB (the whole buffer, as in `shoal bench`).
DEFAULT_SIZES = "8,64:64M:4"
QUICK_SIZES = "8,4K,256K"
QUICK_COLLECTIVES = ("allreduce", "broadcast")
#: The largest ``--from-json`` results file read (a full run writes a few hundred KiB).
MAX_RESULTS_BYTES = 256 * MiB
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


@dataclass
class TuneSpec:
    """What one job measures (the same JSON goes to every rank)."""

    collectives: list[str]
    sizes: list[int]
    repeats: int
    iters: int | None = None  # None: auto_iters(size)
    max_iters: int = 200
    dtype: str = "float32"

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"))


@dataclass
class Measurement:
    collective: str
    nranks: int
    algo: str
    size: int  # the whole buffer, as `shoal bench` counts it
    select_bytes: int  # what a table's ranges are in: the selector's per-rank block
    time_us: float
    samples_us: list[float] = field(default_factory=list)
    errors: int = 0


def select_bytes(lay: check.Layout) -> int:
    """The size a table row's ranges compare with: the call's count (a rank's
    block for the blocked collectives) times the element size."""
    count = lay.block if lay.collective in check.BLOCKED else lay.count
    return count * check.itemsize(lay.dtype)


# ---------------------------------------------------------------- worker side


def worker_main(spec_json: str) -> int:
    """One rank of a tuning job (run under ``shoal run``)."""
    from shoal.bench import shoal_algorithms
    from shoal.bench.worker import emit
    from shoal.bench.worker_shoal import ShoalBackend

    spec = TuneSpec(**json.loads(spec_json))
    backend = ShoalBackend()
    for collective in spec.collectives:
        # what the registry lists now: algorithms added to it are candidates without a change here
        algos = shoal_algorithms(collective, switch=False)
        for nbytes in spec.sizes:
            for record in _measure_size(
                backend, spec, check.layout(collective, nbytes, spec.dtype, backend.size), algos
            ):
                emit(backend, record)
    emit(backend, {"type": "end"})
    backend.close()
    return 0


def _measure_size(backend: Any, spec: TuneSpec, lay: check.Layout, algos: list[str]) -> list[dict[str, Any]]:
    """Every algorithm at one size, side by side: each repeat times each
    algorithm once, on one set of buffers; then each result is checked."""
    from shoal.bench.worker import time_samples

    iters = spec.iters or min(auto_iters(lay.nbytes), spec.max_iters)
    inp, out = check.allocate(lay)
    calls = {a: backend.make_call(lay, inp, out, "sum", 0, a) for a in algos}
    samples: dict[str, list[float]] = {a: [] for a in algos}
    for a in algos:
        time_samples(backend, calls[a], 1, auto_warmup(iters), 0)
    for _ in range(spec.repeats):
        for a in algos:
            samples[a] += time_samples(backend, calls[a], iters, 0, 1)
    records = []
    for a in algos:
        per_repeat = np.array(samples[a], dtype=np.float64)
        backend.allreduce_f64(per_repeat, "max")  # the slowest rank sets the pace
        errors = np.zeros(1, dtype=np.float64)
        check.fill_for_check(lay, backend.rank, "sum", 0, inp, out)
        backend.barrier()
        calls[a]()
        errors[0] = check.count_errors(lay, backend.rank, "sum", 0, inp, out)
        backend.allreduce_f64(errors, "sum")
        # timed calls run on zeros (reductions cannot overflow)
        inp.fill(0)
        if out is not None:
            out.fill(0)
        times = [t * 1e6 for t in per_repeat.tolist()]
        records.append(
            {
                "type": "result",
                "collective": lay.collective,
                "algo": a,
                "size": lay.nbytes,
                "select_bytes": select_bytes(lay),
                "iters": iters,
                "samples_us": times,
                "time_us": statistics.median(times),
                "errors": int(errors[0]),
            }
        )
    return records


# ---------------------------------------------------------------- tables


def winners(points: list[Measurement], tolerance: float) -> list[tuple[int, str]]:
    """The winning correct algorithm per measured size, by selector bytes.

    The fastest wins, except that the previous size's winner stays while it
    is within `tolerance` (a fraction) of the fastest: differences that small
    are noise on a loaded machine, and a table that flips between two
    algorithms at every size is no more right, only harder to read."""
    by_size: dict[int, dict[str, float]] = {}
    for m in points:
        if m.errors == 0:
            by_size.setdefault(m.select_bytes, {})[m.algo] = m.time_us
    out: list[tuple[int, str]] = []
    for size, times in sorted(by_size.items()):
        fastest = min(sorted(times), key=lambda a: times[a])
        previous = out[-1][1] if out else None
        keep = previous in times and times[previous] <= times[fastest] * (1 + tolerance)
        out.append((size, previous if keep and previous is not None else fastest))
    return out


def boundary(below: int, above: int) -> int:
    """Where a range ends between two measured sizes: their geometric middle,
    rounded to a power of two when one lies strictly between them."""
    middle = math.isqrt(below * above)
    power = 1 << max(round(math.log2(max(middle, 1))), 0)
    return power if below < power <= above else middle


def ranges(wins: list[tuple[int, str]]) -> list[tuple[int, int | None, str]]:
    """Half-open byte ranges covering 0..inf: adjacent sizes with one winner
    merged, a boundary between two sizes that differ."""
    out: list[tuple[int, int | None, str]] = []
    for i, (size, algo) in enumerate(wins):
        if out and out[-1][2] == algo:
            continue
        lo = 0 if not out else boundary(wins[i - 1][0], size)
        if out:
            out[-1] = (out[-1][0], lo, out[-1][2])
        out.append((lo, None, algo))
    return out


def format_bytes(n: int) -> str:
    """64K for 65536 (the table's spelling)."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def table_row(collective: str, nranks: int, transport: str, cpus: int, wins: list[tuple[int, str]]) -> str:
    spans = " ".join(
        f"{format_bytes(lo)}-{'inf' if hi is None else format_bytes(hi)}:{algo}" for lo, hi, algo in ranges(wins)
    )
    return f"{collective} world={nranks} transport={transport} cpus={cpus} {spans}"


def table_text(measurements: list[Measurement], header: list[str], transport: str, cpus: int, tolerance: float) -> str:
    lines = [f"# {h}" for h in header]
    keys = sorted({(m.collective, m.nranks) for m in measurements}, key=lambda k: (_order(k[0]), k[1]))
    for collective, nranks in keys:
        points = [m for m in measurements if m.collective == collective and m.nranks == nranks]
        wins = winners(points, tolerance)
        if wins:
            lines.append(table_row(collective, nranks, transport, cpus, wins))
    return "\n".join(lines) + "\n"


def _order(collective: str) -> int:
    """Rows in the order of `shoal bench`'s collectives."""
    from shoal.bench import COLLECTIVES as ALL

    return ALL.index(collective) if collective in ALL else len(ALL)


# ---------------------------------------------------------------- command line


def _positive_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: rank counts must be at least 1")
    return sorted(set(values))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shoal tune",
        description="Measure every candidate algorithm on this machine and write a tuning table "
        "(SHOAL_TUNE_FILE, docs/tuning.md) with the fastest one per size range.",
    )
    p.add_argument("-n", "--nprocs", type=_positive_list, help="rank counts, e.g. 2,4 (default: 2 and the core count)")
    p.add_argument("--collectives", help=f"comma-separated (default {','.join(COLLECTIVES)})")
    p.add_argument("--sizes", help=f"whole-buffer bytes as in shoal bench (default {DEFAULT_SIZES})")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per size; the median decides (default 7)")
    p.add_argument("--iters", type=int, help="calls per repeat (default auto: 200 to 5 by size)")
    p.add_argument("--quick", action="store_true", help=f"a small grid: {QUICK_SIZES}, allreduce and broadcast")
    p.add_argument("--transport", choices=("shm", "tcp"), help="SHOAL_TRANSPORT of the ranks (default auto: shm)")
    p.add_argument("--out", type=Path, default=Path("shoal-tune.txt"), help="the table (default shoal-tune.txt)")
    p.add_argument("--json", type=Path, help="raw measurements (default: the table's name with .json)")
    p.add_argument(
        "--tolerance",
        type=float,
        default=5.0,
        help="percent: the previous size's winner stays while this close to the fastest (default 5)",
    )
    p.add_argument("--from", dest="from_json", type=Path, help="write the table from an earlier run's JSON instead")
    p.add_argument("--timeout", type=float, default=3600, help="seconds one job may take (default 3600)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def _grid(ns: argparse.Namespace) -> tuple[list[int], list[str], list[int]]:
    """(rank counts, collectives, sizes); ValueError naming what is wrong."""
    from shoal.bench import COLLECTIVES as KNOWN

    nprocs = ns.nprocs or sorted({2, os.cpu_count() or 2})
    default_colls = QUICK_COLLECTIVES if ns.quick else COLLECTIVES
    colls = [c.strip() for c in ns.collectives.split(",")] if ns.collectives else list(default_colls)
    bad = [c for c in colls if c not in KNOWN]
    if bad:
        raise ValueError(f"unknown collective(s) {', '.join(bad)} (choose from {', '.join(KNOWN)})")
    sizes = parse_sizes(ns.sizes or (QUICK_SIZES if ns.quick else DEFAULT_SIZES))
    if ns.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    return nprocs, colls, sizes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1])
    try:
        ns = parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    command = "shoal tune " + " ".join(shlex.quote(a) for a in argv)
    if ns.from_json is not None:
        try:
            doc = json.loads(read_regular(ns.from_json, MAX_RESULTS_BYTES))
        except (OSError, ValueError) as e:
            print(f"shoal tune: cannot read {ns.from_json}: {e}", file=sys.stderr)
            return EXIT_USAGE
        return write(doc, ns, None, rebuilt_by=command)
    try:
        nprocs, colls, sizes = _grid(ns)
    except ValueError as e:
        print(f"shoal tune: {e}", file=sys.stderr)
        return EXIT_USAGE
    return tune(ns, nprocs, colls, sizes, command)


def tune(ns: argparse.Namespace, nprocs: list[int], colls: list[str], sizes: list[int], command: str) -> int:
    from shoal.bench import shoal_algorithms
    from shoal.bench.cli import machine

    info = machine()  # before the jobs: the load they meet
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    spec = TuneSpec(
        collectives=colls,
        sizes=sizes,
        repeats=ns.repeats,
        iters=ns.iters,
        max_iters=20 if ns.quick else 200,
    )
    per_job = sum(len(shoal_algorithms(c, switch=False)) for c in colls) * len(sizes)
    progress = Progress(per_job * len(nprocs), enabled=not ns.no_progress)
    progress.note(f"{command}  ->  {ns.out}")
    json_path = ns.json or ns.out.with_suffix(".json")
    measurements: list[Measurement] = []
    failed: list[str] = []
    for n in nprocs:
        got = _run_job(n, spec, ns, json_path.with_name(f"{json_path.stem}-n{n}.log"), progress)
        if got is None:
            failed.append(f"{n} ranks")
            continue
        measurements += got
    progress.finish()
    if not measurements:
        print(f"shoal tune: no measurements ({', '.join(failed)} failed: see the logs)", file=sys.stderr)
        return EXIT_FAILED

    doc = {
        "schema": "shoal-tune/1",
        "command": command,
        "timestamp": stamp,
        "machine": {**info, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "settings": spec.__dict__ | {"transport": ns.transport or "shm", "cpus": os.cpu_count() or 1},
        "measurements": [m.__dict__ for m in measurements],
    }
    code = write(doc, ns, json_path)
    if failed:
        print(f"shoal tune: failed: {', '.join(failed)} (see the logs)", file=sys.stderr)
        return EXIT_FAILED
    return code


def write(doc: dict[str, Any], ns: argparse.Namespace, json_path: Path | None, rebuilt_by: str | None = None) -> int:
    """Writes the table of the measurements in `doc` (and `doc` itself to `json_path`, with the table)."""
    from shoal import _shoal

    info, settings = doc["machine"], doc["settings"]
    sizes = sorted({m["size"] for m in doc["measurements"]})
    header = [
        f"measured by `{doc['command']}` on {doc['timestamp']}",
        f"machine: {info.get('cpu', '?')}, {settings['cpus']} logical CPUs, {info.get('memory', '?')}, "
        f"load average {info['load_average']} at the start, {info['load_average_end']} at the end",
        f"sizes {', '.join(human(s) for s in sizes)} (whole buffer); ranges are the selector's per-rank bytes; "
        f"median of {settings['repeats']} repeats; winners kept within {ns.tolerance:g}% of the fastest",
    ]
    if rebuilt_by:
        header.append(f"table rebuilt from those measurements by `{rebuilt_by}`")
    measurements = [Measurement(**m) for m in doc["measurements"]]
    text = table_text(measurements, header, settings["transport"], settings["cpus"], ns.tolerance / 100)
    try:
        ns.out.write_text(text)
        if json_path is not None:
            json_path.write_text(_json_text(doc | {"table": text}))
    except OSError as e:
        print(f"shoal tune: cannot write {ns.out} or {json_path}: {e.strerror or e}", file=sys.stderr)
        return EXIT_FAILED
    _shoal.tune_tables(str(ns.out))  # what it wrote loads (raises otherwise: a bug here)
    sys.stdout.write(text)
    where = f", measurements in {json_path}" if json_path else ""
    print(f"shoal tune: table in {ns.out}{where}", file=sys.stderr)
    print(f"shoal tune: use it with SHOAL_TUNE_FILE={ns.out}", file=sys.stderr)
    return EXIT_OK


def _json_text(doc: dict[str, Any]) -> str:
    """The raw JSON, one measurement per line (readable, and small enough to keep beside a table)."""
    head = {k: v for k, v in doc.items() if k != "measurements"}
    lines = [json.dumps(m, separators=(",", ":")) for m in doc["measurements"]]
    body = json.dumps(head, indent=1)[:-2]
    return body + ',\n "measurements": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


def _run_job(n: int, spec: TuneSpec, ns: argparse.Namespace, log: Path, progress: Progress) -> list[Measurement] | None:
    """One rank count's measurements, or None when its job failed."""
    from shoal.bench import shoal_algorithms

    out: list[Measurement] = []
    spec_algos = {c: shoal_algorithms(c, switch=False) for c in spec.collectives}

    def on_record(rec: dict[str, Any]) -> None:
        if rec.get("type") != "result":
            return
        keys = ("collective", "algo", "size", "select_bytes", "time_us", "samples_us", "errors")
        out.append(Measurement(nranks=n, **{k: rec[k] for k in keys}))
        label = f"{n} ranks {rec['collective']} {human(rec['size'])}"
        progress.advance(label=f"{label} {rec['algo']}")
        if not progress.tty and rec["algo"] == spec_algos[rec["collective"]][-1]:
            progress.note(label)  # one line per size where no bar is drawn (a log, a pipe)

    worker = [python(), "-m", "shoal.tune", "--worker", spec.to_json()]
    env = {**os.environ, **base_env(), **({"SHOAL_TRANSPORT": ns.transport} if ns.transport else {})}
    progress.set_label(f"{n} ranks starting")
    job = run_job(shoal_run_argv(n, worker), env, log, on_record, ns.timeout)
    status = "ok" if job.returncode == 0 else f"FAILED (exit {job.returncode}, log {log})"
    progress.note(f"  {n} ranks: {len(out)} measurements in {job.seconds:.1f}s: {status}")
    return out if job.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())
