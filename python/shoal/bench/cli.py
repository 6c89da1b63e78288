"""``shoal bench COLLECTIVE``: shoal side by side with Gloo and OpenMPI.

    shoal bench allreduce -n 4 --sizes 8:64M --against gloo,mpi

Every library runs its own N-rank job in this invocation (shoal through
``shoal run``, Gloo as N torch.distributed processes, OpenMPI through
``mpirun``), all with the same worker loop, sizes, timing and checking (see
:mod:`shoal.bench.worker`). By default a round's jobs run together and take
turns repeat by repeat (:mod:`shoal.bench.turns`), so that every competitor
measures a size on the same machine state. Prints an nccl-tests style table
per library and a speedup table; writes ``results.json``, ``table.txt``, ``algbw.png`` and
``speedup.png`` (and the ranks' logs) to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from shoal.bench import COLLECTIVES, INA, check, report, shoal_algorithms
from shoal.bench.progress import Progress
from shoal.bench.runners import DEPS_HINT, LIBRARIES, JobResult, get_runner
from shoal.bench.sizes import human, parse_sizes
from shoal.bench.turns import run_round
from shoal.bench.worker import Spec
from shoal.cli import did_you_mean

EXIT_OK, EXIT_BAD_RESULTS, EXIT_USAGE = 0, 1, 2


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _collective(text: str) -> str:
    """argparse type: one of COLLECTIVES; a near miss is named in the error."""
    if text not in COLLECTIVES:
        hint = did_you_mean(text, COLLECTIVES)
        raise argparse.ArgumentTypeError(f"no collective {text!r}{hint} (choose from {', '.join(COLLECTIVES)})")
    return text


def _iters(text: str) -> int | None:
    return None if text == "auto" else _positive(text)


def parser(prog: str = "shoal bench", nprocs_option: bool = True) -> argparse.ArgumentParser:
    """The benchmark's options; `shoal testbed bench` takes them all but -n (its hosts give the ranks)."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Benchmark a collective with shoal, side by side with Gloo (torch.distributed) and OpenMPI.",
        epilog=f"Competitors are not installed automatically; `{DEPS_HINT}` installs them.",
    )
    p.add_argument("collective", type=_collective, metavar="COLLECTIVE", help=", ".join(COLLECTIVES))
    if nprocs_option:
        p.add_argument("-n", "--nprocs", type=_positive, default=2, help="ranks per job (default 2)")
    p.add_argument(
        "--sizes",
        default="8:64M",
        help="bytes: A:B = powers of two from A to B, or a list (8,1K,64M); K/M/G suffixes (default 8:64M)",
    )
    p.add_argument("--against", default="", help="comma-separated competitors: gloo, mpi, or all (default none)")
    p.add_argument(
        "--algo",
        help="shoal algorithm to run, a comma-separated list, or 'all' for every one plus automatic selection "
        "('ina' too for allreduce when a switch is configured)",
    )
    p.add_argument(
        "--transport",
        choices=("shm", "tcp", "ucx"),
        help="SHOAL_TRANSPORT of the shoal ranks (default auto; ucx: UCX_TLS picks its path)",
    )
    p.add_argument("--dtype", default="float32", choices=check.DTYPES)
    p.add_argument("--op", default="sum", choices=check.OPS, help="reduction (allreduce, reduce, reduce_scatter)")
    p.add_argument("--root", type=int, default=0, help="root of broadcast and reduce")
    p.add_argument("--iters", type=_iters, default=None, help="timed calls per repeat (default auto: 200 to 5 by size)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls per size (default auto: iters/5, 2..20)")
    p.add_argument("--repeats", type=_positive, default=5, help="timed repeats per size; the median is reported")
    p.add_argument(
        "--rounds",
        type=_positive,
        default=1,
        help="run every library's job this many times, interleaved, pooling repeats (evens out load drift)",
    )
    p.add_argument(
        "--interleave",
        choices=("repeat", "job"),
        default="repeat",
        help="repeat (default): a round's jobs run together, taking turns repeat by repeat, so competitors meet "
        "the same machine; job: each job runs all its sizes alone, one job after another",
    )
    p.add_argument("--out", type=Path, help="results folder (default results/bench-<collective>-<timestamp>)")
    p.add_argument("--mpi-args", default="", help="extra mpirun arguments, e.g. '--bind-to none'")
    p.add_argument("--timeout", type=float, default=3600, help="seconds one library's job may take (default 3600)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness check")
    p.add_argument("--no-roofline", action="store_true", help="skip the memory-roofline measurement")
    p.add_argument("--no-plot", action="store_true", help="write no PNG files")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def _competitors(text: str) -> list[str]:
    names = [x.strip().lower() for x in text.split(",") if x.strip()]
    if "all" in names:
        return [x for x in LIBRARIES if x != "shoal"]
    bad = [x for x in names if x not in LIBRARIES or x == "shoal"]
    if bad:
        hint = did_you_mean(bad[0], [x for x in LIBRARIES if x != "shoal"])
        raise ValueError(f"unknown competitor(s) {', '.join(bad)}{hint} (choose from gloo, mpi, all)")
    return list(dict.fromkeys(names))


def _shoal_algos(collective: str, algo: str | None, switch: bool) -> list[str | None]:
    """The shoal series: None is the automatic choice; 'ina' (allreduce) only exists with a switch."""
    if algo is None:
        return [None]
    known = shoal_algorithms(collective, switch)
    if algo == "all":
        return [None, *known]
    wanted = [a.strip() for a in algo.split(",") if a.strip()]
    for a in wanted:
        if a == INA and collective == "allreduce" and not switch:
            raise ValueError("algorithm 'ina' needs a switch: set SHOAL_SWITCH (or `shoal testbed up --switch`)")
        if a not in known and a != "auto":
            hint = did_you_mean(a, known)
            raise ValueError(f"shoal has no {collective} algorithm {a!r}{hint} (known: {', '.join(known)})")
    return [None if a == "auto" else a for a in dict.fromkeys(wanted)]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        info["virtualized"] = " hypervisor" in text
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory"] = f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    repo = Path(__file__).resolve().parents[3]
    try:
        rev = subprocess.run(
            ["git", "-C", str(repo), "describe", "--always", "--dirty"], capture_output=True, text=True
        )
        if rev.returncode == 0:
            info["shoal_git"] = rev.stdout.strip()
    except OSError:
        pass
    try:
        import hashlib

        import shoal._shoal as ext

        so = Path(ext.__file__)
        info["shoal_extension"] = {
            "path": str(so),
            "sha256": hashlib.sha256(so.read_bytes()).hexdigest()[:16],
            "built": _dt.datetime.fromtimestamp(so.stat().st_mtime).isoformat(timespec="seconds"),
        }
    except (ImportError, OSError):
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    try:
        ns = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    return run(ns, "shoal bench " + " ".join(shlex.quote(a) for a in argv))


def run(ns: argparse.Namespace, command: str, prog: str = "shoal bench", testbed: Any = None) -> int:
    """Runs the benchmark `ns` asks for; the exit code. `command` is how it was asked (for the
    report), `prog` the name messages start with.

    `testbed` (a :class:`shoal.testbed.bench.Placement`) runs every job on the emulated hosts; its
    link, not the memory roofline, is then the ceiling the tables compare with."""
    switch = testbed.switch if testbed is not None else bool(os.environ.get("SHOAL_SWITCH", "").strip())
    try:
        sizes = parse_sizes(ns.sizes)
        against = _competitors(ns.against)
        algos = _shoal_algos(ns.collective, ns.algo, switch)
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if ns.collective in ("broadcast", "reduce") and not 0 <= ns.root < ns.nprocs:
        print(f"{prog}: --root {ns.root} is not a rank of {ns.nprocs}", file=sys.stderr)
        return EXIT_USAGE

    options = {"transport": ns.transport, "mpi_args": ns.mpi_args, "testbed": testbed}
    runners = {lib: get_runner(lib, **options) for lib in ["shoal", *against]}
    missing = {lib: r.missing() for lib, r in runners.items()}
    missing = {k: v for k, v in missing.items() if v}
    if missing:
        for why in missing.values():
            print(f"{prog}: {why}", file=sys.stderr)
        print(f"{prog}: nothing was run (competitors are never installed automatically)", file=sys.stderr)
        return EXIT_USAGE

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    kind = "bench" if testbed is None else f"testbed-{testbed.shape()}"
    out_dir = ns.out or Path("results") / f"{kind}-{ns.collective}-{stamp}"
    unwritable = _unwritable(out_dir)
    if unwritable:
        print(f"{prog}: cannot write results to {out_dir}: {unwritable}", file=sys.stderr)
        return EXIT_USAGE

    # series: shoal (automatic selection and/or forced algorithms), then each competitor
    jobs: list[tuple[str, str, str | None]] = [("shoal" if a is None else f"shoal:{a}", "shoal", a) for a in algos]
    jobs += [(lib, lib, None) for lib in against]
    measure_roofline = not ns.no_roofline and testbed is None
    total = ns.rounds * len(jobs) * len(sizes) + (1 if measure_roofline else 0)
    progress = Progress(total, enabled=not ns.no_progress)
    progress.note(f"{prog}: {command}  ->  {out_dir}/")

    doc: dict[str, Any] = {
        "schema": "shoal-bench/1",
        "command": command,
        "timestamp": stamp,
        "collective": ns.collective,
        "nranks": ns.nprocs,
        "dtype": ns.dtype,
        "op": ns.op,
        "root": ns.root,
        "sizes_bytes": [check.layout(ns.collective, s, ns.dtype, ns.nprocs).nbytes for s in sizes],
        "settings": {
            "iters": ns.iters or "auto",
            "warmup": "auto" if ns.warmup is None else ns.warmup,
            "repeats": ns.repeats,
            "rounds": ns.rounds,
            "transport": ns.transport or "auto",
            "algo": ns.algo or "auto",
            "mpi_args": ns.mpi_args,
            "interleave": ns.interleave,
            "timing": "per repeat: barrier, then iters back-to-back calls; time/iters, max over ranks; "
            "median over repeats (pooled over rounds)"
            + ("; a round's jobs take turns repeat by repeat" if ns.interleave == "repeat" else ""),
            "busbw_factor": check.BUS_FACTOR[ns.collective](ns.nprocs),
        },
        "machine": machine(),
        "roofline": None,
        "testbed": None if testbed is None else testbed.describe(),
    }
    if measure_roofline:
        from shoal.bench.roofline import roofline

        progress.set_label("memory roofline")
        doc["roofline"] = roofline(ns.nprocs)
        progress.advance(label="")

    results: dict[str, list[JobResult]] = {name: [] for name, _, _ in jobs}
    specs = {
        name: Spec(
            collective=ns.collective,
            sizes=sizes,
            dtype=ns.dtype,
            op=ns.op,
            iters=ns.iters,
            warmup=ns.warmup,
            repeats=ns.repeats,
            root=ns.root,
            algo=algo,
            check=not ns.no_check,
        )
        for name, _, algo in jobs
    }
    try:
        for rnd in range(ns.rounds):
            if ns.interleave == "repeat":
                round_jobs = [(name, runners[lib], specs[name]) for name, lib, _ in jobs]
                for name, job in _run_turns(round_jobs, ns, out_dir, rnd, len(sizes), progress).items():
                    results[name].append(job)
                continue
            order = jobs if rnd % 2 == 0 else list(reversed(jobs))
            for name, lib, _ in order:
                results[name].append(_run_one(runners[lib], name, specs[name], ns, out_dir, rnd, len(sizes), progress))
    except KeyboardInterrupt:
        progress.note(f"{prog}: interrupted; reporting what finished")
    progress.finish()

    doc["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["series"] = []
    for name, lib, algo in jobs:
        s = report.merge_series(name, lib, algo, results[name], ns.collective, ns.nprocs, ns.dtype, ns.op)
        s["label"] = report.series_label(s)
        doc["series"].append(s)
    paired = ns.interleave == "repeat"  # (repeat i of every job ran in the same turn)
    doc["ratios"] = report.ratios(doc["series"], paired)
    doc["algorithms"] = report.algorithm_table(doc["series"], paired)
    doc["files"] = {"json": "results.json", "table": "table.txt", "markdown": "table.md", "logs": "logs/"}
    if not ns.no_plot:
        pngs = report.plot(doc, out_dir)
        if not pngs:
            print(f"{prog}: no plots: matplotlib is missing (pip install matplotlib)", file=sys.stderr)
        doc["files"].update(pngs)
    text = report.text_report(doc)
    try:
        (out_dir / "table.txt").write_text(text)
        (out_dir / "table.md").write_text(report.markdown_report(doc))
        (out_dir / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        print(f"{prog}: cannot write results to {out_dir}: {e.strerror or e}", file=sys.stderr)
        return EXIT_BAD_RESULTS
    sys.stdout.write(text)
    sys.stdout.flush()
    print(f"{prog}: results in {out_dir}/ ({', '.join(sorted(set(doc['files'].values())))})", file=sys.stderr)

    bad = [s["name"] for s in doc["series"] if s["status"] == "failed"]
    wrong = [s["name"] for s in doc["series"] if any(r["errors"] for r in s["results"])]
    if bad:
        print(f"{prog}: failed: {', '.join(bad)} (see the logs)", file=sys.stderr)
    if wrong:
        print(f"{prog}: WRONG RESULTS from {', '.join(wrong)} (errors column)", file=sys.stderr)
    return EXIT_BAD_RESULTS if bad or wrong else EXIT_OK


def _unwritable(out_dir: Path) -> str | None:
    """Why results cannot be written into ``out_dir`` (created if missing), or None.
    Checked before anything runs, so a bad ``--out`` costs no benchmark time."""
    if out_dir.exists() and not out_dir.is_dir():
        return "it exists and is not a folder"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".shoal-bench-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None


def _log_path(ns: argparse.Namespace, out_dir: Path, rnd: int, name: str) -> Path:
    suffix = f"-round{rnd + 1}" if ns.rounds > 1 else ""
    return out_dir / "logs" / f"{name.replace(':', '-')}{suffix}.log"


class _JobProgress:
    """The progress bar's part in one job: a step per size reported, a note
    when a size is unsupported, and the job's line when it ends."""

    def __init__(self, progress: Progress, name: str, nsizes: int) -> None:
        self.progress, self.name, self.nsizes, self.done = progress, name, nsizes, 0

    def on_record(self, rec: dict[str, Any]) -> None:
        if rec.get("type") == "result":
            self.done += 1
            self.progress.advance(label=f"{self.name} {human(rec['size'])}")
        elif rec.get("type") == "unsupported":
            self.progress.note(f"  {self.name}: unsupported: {rec['reason']}")

    def ended(self, job: JobResult, how: str) -> None:
        if self.done < self.nsizes:
            self.progress.advance(self.nsizes - self.done)
        status = "ok" if job.returncode == 0 else f"FAILED (exit {job.returncode}, log {job.log})"
        self.progress.note(f"  {self.name}: {self.done}/{self.nsizes} sizes {how}: {status}")


def _run_turns(
    jobs: list[tuple[str, Any, Spec]], ns: argparse.Namespace, out_dir: Path, rnd: int, nsizes: int, progress: Progress
) -> dict[str, JobResult]:
    """One round whose jobs run together, taking turns repeat by repeat (:mod:`shoal.bench.turns`)."""
    shown = {name: _JobProgress(progress, name, nsizes) for name, _, _ in jobs}
    progress.set_label(f"round {rnd + 1}: starting {len(jobs)} jobs")
    results = run_round(
        jobs,
        ns.nprocs,
        nsizes,
        ns.repeats,
        lambda name: _log_path(ns, out_dir, rnd, name),
        lambda name, rec: shown[name].on_record(rec),
        ns.timeout,
        first_reversed=rnd % 2 == 1,
    )
    for name, job in results.items():
        shown[name].ended(job, "in turns")
    return results


def _run_one(
    runner: Any, name: str, spec: Spec, ns: argparse.Namespace, out_dir: Path, rnd: int, nsizes: int, progress: Progress
) -> JobResult:
    shown = _JobProgress(progress, name, nsizes)
    progress.set_label(f"{name} starting")
    job: JobResult = runner.run(spec, ns.nprocs, _log_path(ns, out_dir, rnd, name), shown.on_record, ns.timeout)
    shown.ended(job, f"in {job.seconds:.1f}s")
    return job


if __name__ == "__main__":
    sys.exit(main())
