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
machine class (``cpus=``, ``vendor=``), adjacent sizes with the same winner merged and a
boundary halfway (geometrically) between measured sizes with different
winners. Each range records its evidence, the winner's margin over the
runner-up and the spread of their repeats (``0-4K:shm_flat,margin=40%,noise=6%``);
the selector follows a range where the margin exceeds the noise. Where it
does not (the winner tied with the runner-up), the range lists the algorithms
the winner beat beyond the noise at every size (``,beats=scatter_allgather+shm_read``),
and the selector follows it when its cost model would pick one of them. The
raw measurements go to a JSON file beside it.

``shoal tune --check`` measures the same grid and reports every size where
the tables in force (``SHOAL_TUNE_FILE``'s and the built-in one) make the
selector pick an algorithm slower than the cost model's own choice.
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
    measure: bool = True  # False: only what the selector picks at each size (--check's model job)

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
    # the figures the model priced with (calibrated at init): --check prices the model's picks with the same
    emit(backend, {"type": "cost", "figures": backend.group.cost_model})
    for collective in spec.collectives:
        # what the registry lists now: algorithms added to it are candidates without a change here
        algos = shoal_algorithms(collective, switch=False)
        for nbytes in spec.sizes:
            lay = check.layout(collective, nbytes, spec.dtype, backend.size)
            picked = backend.algorithm(lay, None, 0)  # what the selector runs for such a call
            emit(backend, {"type": "pick", "collective": collective, "size": lay.nbytes, "algo": picked})
            if spec.measure:
                for record in _measure_size(backend, spec, lay, algos):
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


@dataclass(frozen=True)
class Win:
    """The fastest correct algorithm at one size, and how clearly it won."""

    size: int  # selector bytes
    algo: str
    margin: float  # the runner-up's time over the winner's, minus 1 (0 without a runner-up)
    noise: float  # the larger spread of the two's repeats, at least the tolerance
    # where the win is not established: the algorithms it beat beyond their own noise
    beats: frozenset[str] = frozenset()

    @property
    def established(self) -> bool:
        """A win larger than the scatter of the measurement itself (the selector's rule)."""
        return self.margin > self.noise


def spread(samples: list[float]) -> float:
    """How far a measurement's repeats scatter: (slowest - fastest) / median."""
    return (max(samples) - min(samples)) / statistics.median(samples) if samples else math.inf


def reach_up(samples: list[float]) -> float:
    """How far above its median a measurement's slowest repeat lies, as a fraction of the median."""
    return max(samples) / statistics.median(samples) - 1 if samples else math.inf


def reach_down(samples: list[float]) -> float:
    """How far below its median a measurement's fastest repeat lies, as a fraction of the median."""
    return 1 - min(samples) / statistics.median(samples) if samples else math.inf


def winners(points: list[Measurement], tolerance: float) -> list[Win]:
    """The winning correct algorithm per measured size, by selector bytes,
    with its margin over the runner-up and the noise it must exceed.

    The noise is how far the two's repeats reach towards each other: the
    winner's slowest above its median plus the runner-up's fastest below
    its own (the two medians may be that much closer), and at least
    `tolerance` (a fraction): a win smaller than that is not one the
    selector follows. The winner's fast repeats and the runner-up's slow
    ones (a preempted repeat) only widen the gap, so they do not count."""
    by_size: dict[int, dict[str, Measurement]] = {}
    for m in points:
        if m.errors == 0:
            by_size.setdefault(m.select_bytes, {})[m.algo] = m
    out: list[Win] = []
    for size, ms in sorted(by_size.items()):
        ranked = sorted(ms.values(), key=lambda m: (m.time_us, m.algo))
        best = ranked[0]
        if len(ranked) == 1:
            out.append(Win(size, best.algo, 0.0, max(reach_up(best.samples_us), tolerance)))
            continue
        # each slower one's margin and noise; the runner-up's decide, and where it tied, the
        # others it beat beyond their noise may still be left for it (the selector's `beats=`)
        gaps = [(other.algo, *gap(best, other, tolerance)) for other in ranked[1:]]
        _, margin, noise = gaps[0]
        beats = frozenset() if margin > noise else frozenset(a for a, m, n in gaps if m > n)
        out.append(Win(size, best.algo, margin, noise, beats))
    return out


def gap(best: Measurement, other: Measurement, tolerance: float) -> tuple[float, float]:
    """How much slower `other` was than `best`, and the noise that must be exceeded: how far
    the two's repeats reach towards each other, at least `tolerance`."""
    margin = other.time_us / best.time_us - 1
    return margin, max(reach_up(best.samples_us) + reach_down(other.samples_us), tolerance)


def boundary(below: int, above: int) -> int:
    """Where a range ends between two measured sizes: their geometric middle,
    rounded to a power of two when one lies strictly between them."""
    middle = math.isqrt(below * above)
    power = 1 << max(round(math.log2(max(middle, 1))), 0)
    return power if below < power <= above else middle


def same_range(a: Win, b: Win) -> bool:
    """Whether two adjacent sizes share a range: one winner, established or not alike, and a
    tie's list of the algorithms it beat alike (the selector reads it per range)."""
    return a.algo == b.algo and a.established == b.established and (a.established or a.beats == b.beats)


def ranges(wins: list[Win]) -> list[tuple[int, int | None, Win]]:
    """Half-open byte ranges covering 0..inf: adjacent sizes with one winner,
    established or not alike, merged, a boundary between two sizes that
    differ. A merged range carries the evidence of its weakest size."""
    out: list[tuple[int, int | None, Win]] = []
    for i, win in enumerate(wins):
        if out and same_range(out[-1][2], win):
            lo, hi, held = out[-1]
            weakest = min(held, win, key=lambda w: w.margin - w.noise)
            out[-1] = (lo, hi, weakest)
            continue
        lo = 0 if not out else boundary(wins[i - 1].size, win.size)
        if out:
            out[-1] = (out[-1][0], lo, out[-1][2])
        out.append((lo, None, win))
    return out


def percent(fraction: float) -> str:
    """A fraction as the table's percent, one decimal at most (12%, 12.5%)."""
    tenths = round(min(fraction, 10_000.0) * 1000)
    return f"{tenths // 10}%" if tenths % 10 == 0 else f"{tenths // 10}.{tenths % 10}%"


def format_bytes(n: int) -> str:
    """64K for 65536 (the table's spelling)."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def table_row(collective: str, nranks: int, transport: str, machine: str, wins: list[Win]) -> str:
    """One row; `machine` is its class, `cpus=N vendor=V`."""
    spans = " ".join(
        f"{format_bytes(lo)}-{'inf' if hi is None else format_bytes(hi)}:{w.algo},"
        f"margin={percent(w.margin)},noise={percent(w.noise)}{beats_text(w)}"
        for lo, hi, w in ranges(wins)
    )
    return f"{collective} world={nranks} transport={transport} {machine} {spans}"


def beats_text(w: Win) -> str:
    """`,beats=a+b` for a range that is not established but beat some algorithms clearly."""
    return f",beats={'+'.join(sorted(w.beats))}" if w.beats and not w.established else ""


def table_text(
    measurements: list[Measurement], header: list[str], transport: str, machine: str, tolerance: float
) -> str:
    lines = [f"# {h}" for h in header]
    keys = sorted({(m.collective, m.nranks) for m in measurements}, key=lambda k: (_order(k[0]), k[1]))
    for collective, nranks in keys:
        points = [m for m in measurements if m.collective == collective and m.nranks == nranks]
        wins = winners(points, tolerance)
        if wins:
            lines.append(table_row(collective, nranks, transport, machine, wins))
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
        help="percent: the least margin a winner needs; the noise written is never below it (default 5)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="measure what the tables in force (SHOAL_TUNE_FILE and the built-in one) make the selector pick "
        "against the cost model's choice and the fastest, and report every size where the tables lose",
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
    if ns.check:
        return check_tables(ns, nprocs, colls, sizes)
    return tune(ns, nprocs, colls, sizes, command)


def tune(ns: argparse.Namespace, nprocs: list[int], colls: list[str], sizes: list[int], command: str) -> int:
    from shoal import _shoal
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
        "settings": spec.__dict__
        | {"transport": ns.transport or "shm", "cpus": os.cpu_count() or 1, "vendor": _shoal.tune_tables("")["vendor"]},
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
        f"median of {settings['repeats']} repeats; margin: the runner-up's time over the winner's; "
        f"noise: how far the two's repeats reach towards each other, (winner's slowest - its median) / its median "
        f"+ (runner-up's median - its fastest) / its median, at least {ns.tolerance:g}%",
        "the selector follows a range only where its margin exceeds its noise (docs/tuning.md)",
    ]
    if rebuilt_by:
        header.append(f"table rebuilt from those measurements by `{rebuilt_by}`")
    measurements = [Measurement(**m) for m in doc["measurements"]]
    try:
        machine_class = f"cpus={settings['cpus']} vendor={measured_vendor(doc)}"
    except ValueError as e:
        print(f"shoal tune: {e}", file=sys.stderr)
        return EXIT_USAGE
    text = table_text(measurements, header, settings["transport"], machine_class, ns.tolerance / 100)
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


def measured_vendor(doc: dict[str, Any]) -> str:
    """The CPU maker a run measured on (`vendor=`): recorded since the rows name it; for an
    earlier run's JSON, read off the CPU model it recorded."""
    if "vendor" in doc["settings"]:
        return str(doc["settings"]["vendor"])
    model = str(doc["machine"].get("cpu", ""))
    for maker, vendor in (("Intel", "intel"), ("AMD", "amd")):
        if maker in model:
            return vendor
    raise ValueError(f"the measurements do not say which CPU vendor they were taken on (cpu: {model!r})")


def _json_text(doc: dict[str, Any]) -> str:
    """The raw JSON, one measurement per line (readable, and small enough to keep beside a table)."""
    head = {k: v for k, v in doc.items() if k != "measurements"}
    lines = [json.dumps(m, separators=(",", ":")) for m in doc["measurements"]]
    body = json.dumps(head, indent=1)[:-2]
    return body + ',\n "measurements": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


def _run_job(
    n: int,
    spec: TuneSpec,
    ns: argparse.Namespace,
    log: Path,
    progress: Progress,
    picks: dict[tuple[str, int], str] | None = None,
    env_changes: dict[str, str | None] | None = None,
    cost: dict[str, float] | None = None,
) -> list[Measurement] | None:
    """One rank count's measurements, or None when its job failed. The
    selector's pick per (collective, size) goes to `picks`, the cost model's
    figures to `cost`; `env_changes` sets (or, with None, removes) variables
    of the ranks' environment."""
    from shoal.bench import shoal_algorithms

    out: list[Measurement] = []
    spec_algos = {c: shoal_algorithms(c, switch=False) for c in spec.collectives}

    def on_record(rec: dict[str, Any]) -> None:
        if rec.get("type") == "pick" and picks is not None:
            picks[(rec["collective"], rec["size"])] = rec["algo"]
        if rec.get("type") == "cost" and cost is not None:
            cost.update(rec["figures"])
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
    for key, value in (env_changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    progress.set_label(f"{n} ranks starting")
    job = run_job(shoal_run_argv(n, worker), env, log, on_record, ns.timeout)
    status = "ok" if job.returncode == 0 else f"FAILED (exit {job.returncode}, log {log})"
    progress.note(f"  {n} ranks: {len(out)} measurements in {job.seconds:.1f}s: {status}")
    return out if job.returncode == 0 else None


# ---------------------------------------------------------------- --check


@dataclass(frozen=True)
class Verdict:
    """One size of ``--check``: the tables' pick against the model's and the fastest."""

    collective: str
    nranks: int
    size: int  # whole buffer
    picked: Measurement  # what the selector runs with the tables in force
    model: Measurement  # what the cost model alone would run
    best: Measurement  # the fastest correct algorithm

    @property
    def loses(self) -> bool:
        """The tables' pick is slower than the model's by more than the two's spread:
        the tables made this call slower than having no tables."""
        if self.picked.algo == self.model.algo:
            return False
        noise = max(spread(self.picked.samples_us), spread(self.model.samples_us))
        return self.picked.time_us > self.model.time_us * (1 + noise) or self.picked.errors > 0


def verdicts(
    measurements: list[Measurement], picked: dict[tuple[str, int], str], model: dict[tuple[str, int], str], nranks: int
) -> list[Verdict]:
    """One verdict per measured (collective, size) of one rank count."""
    out = []
    measured = {(m.collective, m.size) for m in measurements if m.nranks == nranks}
    keys = sorted(measured, key=lambda k: (_order(k[0]), k[1]))
    for collective, size in keys:
        at = {m.algo: m for m in measurements if (m.nranks, m.collective, m.size) == (nranks, collective, size)}
        correct = [m for m in at.values() if m.errors == 0]
        pick, chosen = picked.get((collective, size)), model.get((collective, size))
        if not correct or pick not in at or chosen not in at:
            continue  # the picks of an algorithm the job did not measure (not one the registry lists)
        best = min(correct, key=lambda m: (m.time_us, m.algo))
        out.append(Verdict(collective, nranks, size, at[pick], at[chosen], best))
    return out


def verdict_text(found: list[Verdict]) -> str:
    """The report: one line per size, the losing ones marked."""
    lines = [f"{'collective':<15}{'ranks':>5}{'size':>9}  {'tables pick':<28}{'model':<28}{'fastest':<28}verdict"]
    for v in found:

        def cell(m: Measurement) -> str:
            return f"{m.algo} {m.time_us:.1f}us"

        verdict = "LOSES to the model" if v.loses else "ok"
        lines.append(
            f"{v.collective:<15}{v.nranks:>5}{human(v.size):>9}  {cell(v.picked):<27} {cell(v.model):<27} "
            f"{cell(v.best):<27} {verdict} ({v.picked.time_us / v.best.time_us:.2f}x the fastest)"
        )
    return "\n".join(lines) + "\n"


def check_tables(ns: argparse.Namespace, nprocs: list[int], colls: list[str], sizes: list[int]) -> int:
    """``--check``: per rank count, one job measures every algorithm and
    records the selector's picks with the tables in force, and one short job
    records the cost model's picks (no tables, and the first job's
    calibrated figures: calibrating again under load could price the model
    otherwise); the report names every size where the tables' pick loses to
    the model's."""
    from shoal.bench import shoal_algorithms

    spec = TuneSpec(collectives=colls, sizes=sizes, repeats=ns.repeats, iters=ns.iters)
    no_tables = TuneSpec(collectives=colls, sizes=sizes, repeats=1, measure=False)
    per_job = sum(len(shoal_algorithms(c, switch=False)) for c in colls) * len(sizes)
    progress = Progress(per_job * len(nprocs), enabled=not ns.no_progress)
    logs = (ns.json or ns.out.with_suffix(".json")).with_suffix("")
    found: list[Verdict] = []
    failed = False
    for n in nprocs:
        picked: dict[tuple[str, int], str] = {}
        model: dict[tuple[str, int], str] = {}
        figures: dict[str, float] = {}
        log = logs.with_name(f"{logs.name}-check-n{n}.log")
        measured = _run_job(n, spec, ns, log, progress, picked, cost=figures)
        if measured is None:
            failed = True
            continue
        cost = ",".join(f"{k}={v!r}" for k, v in figures.items())
        no_tables_env = {"SHOAL_TUNE_FILE": None, "SHOAL_TUNE_BUILTIN": "0", "SHOAL_COST": cost}
        log = logs.with_name(f"{logs.name}-model-n{n}.log")
        if _run_job(n, no_tables, ns, log, progress, model, no_tables_env) is None:
            failed = True
            continue
        found += verdicts(measured, picked, model, n)
    progress.finish()
    sys.stdout.write(verdict_text(found))
    losing = [v for v in found if v.loses]
    if failed:
        print("shoal tune --check: a job failed (see the logs)", file=sys.stderr)
        return EXIT_FAILED
    if losing:
        print(f"shoal tune --check: the tables lose to the cost model at {len(losing)} size(s)", file=sys.stderr)
        return EXIT_FAILED
    print("shoal tune --check: the tables lose nowhere", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
