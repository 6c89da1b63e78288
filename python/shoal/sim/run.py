"""``shoal sim run CONFIG.toml --out DIR [--engine packet|flow]``: a whole scenario.

The TOML file is read and parsed by the Rust side (crates/shoal-sim/src/scenario/file.rs), the
same parser ``shoal-sim run`` uses; options that change it (``--engine``) go with it as dotted
``(key, value)`` overrides (``engine``, ``jobs.0.model``). The report
goes to ``DIR/report.json``, the records to ``DIR/flows.csv``, ``DIR/iterations.csv``
and ``DIR/links.csv``; plots to ``DIR/*.png`` when matplotlib is present.
See docs/sim.md ("Scenarios") for the keys.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


class ProgressBar:
    """A one-line progress bar on stderr (only on a terminal unless forced)."""

    def __init__(self, label: str, enabled: bool | None = None) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.shown = -1

    def __call__(self, fraction: float) -> None:
        percent = int(fraction * 100)
        if not self.enabled or percent == self.shown:
            return
        self.shown = percent
        bar = "#" * (percent // 4)
        end = "\n" if percent >= 100 else ""
        print(f"\r{self.label} [{bar:25s}] {percent:3d}%", end=end, file=sys.stderr, flush=True)


def run_pairs(
    pairs: list[tuple[str, str]],
    progress: ProgressBar | None = None,
    out: Path | None = None,
    config: Path | None = None,
) -> dict[str, Any]:
    """Runs a scenario: the TOML file `config` if given, with `pairs` (dotted key, value) set over it, else
    the pairs alone; returns the report, with ``warnings`` (empty unless the run is degenerate: docs/sim.md,
    "Files"); with `out`, writes the run's CSV records there. ValueError names a bad key or value (and,
    from the file, the file and the line)."""
    from shoal._shoal import sim_run_json

    text, warnings = sim_run_json(
        pairs, progress, None if out is None else str(out), None if config is None else str(config)
    )
    report: dict[str, Any] = json.loads(text)
    report["warnings"] = warnings
    return report


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of one of the run's CSV records, as dicts by column."""
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def plot_fct_cdf(out: Path) -> Path:
    """The CDF of background flow completion times (``out/flows.csv``): all, small, short and long flows
    (the report's buckets: PANAMA's short < 40 MB <= long, and small < 100 KB)."""
    import matplotlib.pyplot as plt

    flows = read_csv(out / "flows.csv")
    fig, ax = plt.subplots()
    for label, keep in (
        ("all", lambda b: True),
        ("small (< 100 KB)", lambda b: b < 100_000),
        ("short (< 40 MB)", lambda b: b < 40_000_000),
        ("long (>= 40 MB)", lambda b: b >= 40_000_000),
    ):
        fcts = sorted(float(f["fct_s"]) for f in flows if keep(int(f["bytes"])))
        if fcts:
            ax.plot(fcts, [(i + 1) / len(fcts) for i in range(len(fcts))], label=f"{label}, {len(fcts)} flows")
    ax.set_xscale("log")
    ax.set_xlabel("flow completion time (s)")
    ax.set_ylabel("fraction of flows")
    ax.legend(fontsize="small")
    path = out / "fct_cdf.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_report(report: dict[str, Any], out: Path) -> str:
    """Best effort: FCT percentiles by size and iteration times as PNGs; says what it did."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plots (pip install matplotlib)"
    fct = report["background"]["fct_s"]
    buckets = [b for b in ("short", "all", "long") if fct[b]["count"]]
    fig, ax = plt.subplots()
    ax.bar([f"{b} mean" for b in buckets], [fct[b]["mean"] for b in buckets])
    ax.bar([f"{b} p99" for b in buckets], [fct[b]["p99"] for b in buckets])
    ax.set_yscale("log")
    ax.set_ylabel("flow completion time (s)")
    fig.savefig(out / "fct.png")
    fig, ax = plt.subplots()
    for i, job in enumerate(report["jobs"]):
        ax.plot(job["iterations_s"], marker="o", label=f"job {i}: {job['model']} x{job['workers']} {job['algorithm']}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("iteration time (s)")
    ax.legend(fontsize="small")
    fig.savefig(out / "iterations.png")
    plt.close("all")
    cdf = plot_fct_cdf(out) if (out / "flows.csv").exists() else None
    return f"plots: {out / 'fct.png'}, {out / 'iterations.png'}" + (f", {cdf}" if cdf else "")


def run(config: Path, out: Path, progress: bool | None = None, engine: str | None = None) -> dict[str, Any]:
    """Runs the scenario of TOML file `config` (on `engine` if given, else the file's ``engine``, else
    the flow engine); writes ``out/report.json``, the records ``flows.csv``, ``iterations.csv`` and
    ``links.csv`` (and plots); warns of a degenerate run; returns the report."""
    out.mkdir(parents=True, exist_ok=True)
    overrides = [] if engine is None else [("engine", engine)]
    report = run_pairs(overrides, ProgressBar(f"shoal sim run {config.name}", progress), out, config)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    for warning in report["warnings"]:
        print(f"shoal sim run: warning: {warning}", file=sys.stderr)
    print(plot_report(report, out), file=sys.stderr)
    return report


def main(args: list[str]) -> int:
    """``shoal sim run CONFIG.toml --out DIR``."""
    import argparse

    p = argparse.ArgumentParser(prog="shoal sim run", description="Run a network scenario.")
    p.add_argument("config", type=Path, help="scenario TOML file (docs/sim.md, 'Scenarios')")
    p.add_argument("--engine", choices=("flow", "packet"), help="overrides the file's engine (default flow)")
    p.add_argument("--out", type=Path, required=True, help="directory for report.json and plots")
    try:
        ns = p.parse_args(args)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    try:
        report = run(ns.config, ns.out, engine=ns.engine)
    except (ValueError, OSError) as e:
        print(f"shoal sim run: {e}", file=sys.stderr)
        return 2
    print(_summary(report) + f"; report in {ns.out / 'report.json'}")
    return 0


def _summary(report: dict[str, Any]) -> str:
    """The report in one line; a figure with nothing behind it (no flow of its
    bucket finished, no iteration) says so instead of printing 0."""
    background = report["background"]
    fct = background["fct_s"]
    short = f"short p99 FCT {fct['short']['p99'] * 1e3:.3f} ms" if fct["short"]["count"] else "no short flow finished"
    long = (
        f"long-flow throughput {background['long_throughput_bps'] / 1e9:.2f} Gb/s"
        if fct["long"]["count"]
        else "no long flow finished"
    )
    finished = any(job["iterations_s"] for job in report["jobs"])
    iteration = f"mean iteration {report['mean_iteration_s']:.3f} s" if finished else "no iteration finished"
    return (
        f"{background['flows']} background flows: {short}, {long}; {len(report['jobs'])} jobs, {iteration}; "
        f"load offered {report['total_load']:.2f}, carried {report['carried_load']:.2f}"
    )
