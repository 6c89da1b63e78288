"""``shoal sim panama --out DIR``: reproduce PANAMA's section 7 (Figs. 8, 9, 10).

Fig. 8 runs on either engine (``--engine packet|flow``), over several seeds, every point a
separate process; the variants are compared as the paper does (python/shoal/sim/paper_metrics.py).
Fig. 9 runs on either engine too (``--fig9-engine``, default flow), Fig. 10 on the flow engine.

Fig. 8: p99 short-flow FCT, long-flow throughput and training (iteration) time against total
load, for Ideal, Ring-AllReduce, SwitchML*-like, PANAMA, PANAMA-0.88/0.94 (one random set of
jobs per load, the same for every variant). Fig. 9: aggregation time with 4 trees vs each single
tree vs ring on a k=4 fat-tree under growing long-flow load. Fig. 10: an aggregation flow and a
background flow on one link, with and without PANAMA's congestion control.
Results go to ``DIR/fig8.json``, ``fig9.json``, ``fig10.json`` (and PNGs with matplotlib), each Fig. 8
point's CSV records to ``DIR/fig8-VARIANT-LOAD/seed-SEED/``.
The paper's numbers and ours side by side: docs/sim.md ("PANAMA").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from shoal.sim.paper_metrics import compare, over_seeds
from shoal.sim.run import ProgressBar, run_pairs

#: The paper's headline ratios vs Ring-AllReduce at 80% load (section 7).
PAPER = {"p99_short_fct": 4.5, "long_throughput": 1.33, "training_time": 1.34}
VARIANTS = ("ideal", "ring", "switchml", "panama", "panama-0.88", "panama-0.94")
LOADS = (0.2, 0.4, 0.6, 0.8)
RATE_INTERVAL = "50us"


def base_pairs(
    k: int, duration: str, seed: int, engine: str = "flow", warmup: str = "0s", pfc: bool = True
) -> list[tuple[str, str]]:
    """The paper's setup (k-ary fat-tree at 10 Gb/s, K = 85, 64 MB per switch, > 40 MB aggregated,
    20% web search + data mining background, a lossless fabric: PFC on the packet engine) plus our
    choices (docs/sim.md)."""
    lossless = [("pfc.enabled", "true")] if engine == "packet" and pfc else []
    return [
        ("engine", engine),
        ("warmup", warmup),
        *lossless,
        ("topology", f"fattree:k={k}"),
        ("link", "10gbit"),
        ("latency", "1us"),
        ("ecn_k", "85"),
        ("switch_memory", "64MB"),
        ("ina_min_bytes", "40MB"),
        ("background.load", "0.2"),
        ("background.distribution", "websearch,datamining"),
        ("slots_per_host", "2"),
        ("chunk_bytes", "64MiB"),
        ("random_jobs.trees", "4"),
        ("duration", duration),
        ("seed", str(seed)),
        # Rates recomputed at most every 50 us (docs/sim.md, "PANAMA"): 9x
        # faster at k=16, at a few percent on FCTs and iteration times.
        ("rate_interval", RATE_INTERVAL),
    ]


def fig8_point(pairs: list[tuple[str, str]], variant: str, load: float, records: str | None = None) -> dict[str, Any]:
    """One Fig. 8 point, with the CPU time it cost (run in a worker process: the CPU time is its own);
    with `records`, the point's CSV records go to that directory."""
    import time

    from shoal._shoal import sim_panama_fig8_json

    cpu = time.process_time()
    point: dict[str, Any] = json.loads(sim_panama_fig8_json(pairs, variant, load, records))
    point["cpu_s"] = time.process_time() - cpu
    point["events_per_cpu_s"] = point["events"] / point["cpu_s"] if point["cpu_s"] > 0 else None
    return point


def fig8(
    k: int,
    duration: str,
    seeds: tuple[int, ...],
    loads: tuple[float, ...],
    variants: tuple[str, ...],
    jobs: int | None = None,
    engine: str = "flow",
    warmup: str = "0s",
    pfc: bool = True,
    records: Path | None = None,
) -> dict[str, Any]:
    """Every (seed, variant, load) point, each in its own process (`jobs` at once, default every
    core), and PANAMA against ring at the highest load, per seed and over the seeds. With `records`,
    each point's CSV records go to ``records/fig8-VARIANT-LOAD/seed-SEED/`` (docs/sim.md, "Files")."""
    from concurrent.futures import ProcessPoolExecutor

    by_seed: dict[int, dict[str, list[dict[str, Any]]]] = {s: {v: [] for v in variants} for s in seeds}
    bar = ProgressBar("fig. 8")
    todo = [(s, v, load) for s in seeds for load in loads for v in variants]
    bar(0.0)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [
            pool.submit(
                fig8_point,
                base_pairs(k, duration, s, engine, warmup, pfc),
                v,
                load,
                None if records is None else str(point_dir(records, v, load, s)),
            )
            for s, v, load in todo
        ]
        for i, ((s, v, _), future) in enumerate(zip(todo, futures)):
            by_seed[s][v].append(future.result())
            bar((i + 1) / len(todo))
    bar(1.0)
    result: dict[str, Any] = {
        "k": k,
        "engine": engine,
        "pfc": engine == "packet" and pfc,
        "duration": duration,
        "warmup": warmup,
        "seeds": list(seeds),
        "points": by_seed[seeds[0]],
        "points_by_seed": {str(s): p for s, p in by_seed.items()},
        "paper": PAPER,
    }
    if "ring" in variants and "panama" in variants:
        per_seed = [compare(by_seed[s]["ring"][-1], by_seed[s]["panama"][-1]) for s in seeds]
        result["ours_vs_ring_at_max_load"] = {"per_seed": per_seed, "over_seeds": over_seeds(per_seed)}
    result["warnings"] = [f"seed {s}, {w}" for s in seeds for w in fig8_warnings(by_seed[s], loads)]
    return result


def fig8_warnings(points: dict[str, list[dict[str, Any]]], loads: tuple[float, ...]) -> list[str]:
    """What makes Fig. 8 degenerate (docs/sim.md, "Files"): a point where no job finished an
    iteration, or a load at which the variants (Ideal aside) gave identical results."""
    warnings = []
    for i, load in enumerate(loads):
        idle = [v for v, p in points.items() if p[i]["jobs"] and not p[i]["mean_iteration_s"]]
        if idle:
            warnings.append(f"load {load}: no job finished an iteration ({', '.join(idle)}); run longer")
        metrics = {
            v: (p[i]["p99_short_fct_s"], p[i]["long_throughput_bps"], p[i]["mean_iteration_s"])
            for v, p in points.items()
            if v != "ideal"
        }
        if len(metrics) > 1 and len(set(metrics.values())) == 1:
            warnings.append(f"load {load}: the variants {', '.join(metrics)} gave identical results")
    return warnings


def point_dir(records: Path, variant: str, load: float, seed: int) -> Path:
    """Where a Fig. 8 point's records go."""
    return records / f"fig8-{variant}-{load:g}" / f"seed-{seed}"


#: Fig. 9's cases: PANAMA over its 4 trees, over each single tree (Agg1..Agg4), and ring.
FIG9_CASES = ("panama", "panama-agg1", "panama-agg2", "panama-agg3", "panama-agg4", "ring")


def fig9_pairs(
    seed: int, case: str, long_flows: int, engine: str = "flow", duration: str = "8s"
) -> list[tuple[str, str]]:
    """One case of Fig. 9: one 8-worker VGG16 job on a k=4 fat-tree (Fig. 3's topology) beside `long_flows`
    long flows between the other hosts."""
    if case not in FIG9_CASES:
        raise ValueError(f"unknown Fig. 9 case {case!r} (known: {', '.join(FIG9_CASES)})")
    one_tree = [("jobs.0.tree", str(int(case[-1]) - 1))] if case.startswith("panama-agg") else []
    return [
        ("engine", engine),
        ("topology", "fattree:k=4"),
        ("duration", duration),  # flow engine: a single tree under 12 long flows needs ~2.3 s per round
        ("seed", str(seed)),
        ("long_flows", str(long_flows)),
        ("jobs.0.workers", "8"),
        ("jobs.0.model", "vgg16"),
        ("jobs.0.algorithm", "ring" if case == "ring" else "panama"),
        ("jobs.0.trees", "4"),
        ("jobs.0.placement", "random"),
        ("chunk_bytes", "64MiB"),
        # Every tree its own window (PANAMA's): trees on disjoint core links each get a share.
        ("tree_share", "each"),
        *one_tree,
    ]


def fig9_time(report: dict[str, Any]) -> float | None:
    """The job's mean aggregation (communication) time per iteration; None if no iteration finished."""
    job = report["jobs"][0]
    return float(job["mean_comm_s"]) if job["iterations_s"] else None


def fig9(
    seed: int, long_flows: tuple[int, ...] = (0, 2, 4, 8, 12), engine: str = "flow", duration: str = "8s"
) -> dict[str, Any]:
    """Aggregation time of Fig. 9's job for each case as long flows grow (None: no iteration finished)."""
    result: dict[str, Any] = {"engine": engine, "duration": duration, "long_flows": list(long_flows)}
    result["mean_comm_s"] = {}
    bar = ProgressBar("fig. 9")
    for i, case in enumerate(FIG9_CASES):
        bar(i / len(FIG9_CASES))
        reports = [run_pairs(fig9_pairs(seed, case, n, engine, duration)) for n in long_flows]
        result["mean_comm_s"][case] = [fig9_time(r) for r in reports]
    bar(1.0)
    return result


def fig10() -> dict[str, Any]:
    """Rates on a link shared by a background flow and an aggregation flow joining at 0.25 s."""
    from shoal._shoal import sim_panama_fig10_json

    return {
        "panama": json.loads(sim_panama_fig10_json(True)),
        "no_congestion_control": json.loads(sim_panama_fig10_json(False)),
    }


def plot(out: Path, f8: dict[str, Any], f9: dict[str, Any], f10: dict[str, Any]) -> str:
    """Best effort PNGs of the three figures."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plots (pip install matplotlib)"
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    metrics = [("p99_short_fct_s", "p99 short FCT (s)"), ("long_throughput_bps", "long-flow throughput (b/s)")]
    metrics.append(("mean_iteration_s", "training iteration time (s)"))
    for ax, (key, label) in zip(axes, metrics):
        for v, pts in f8["points"].items():
            ax.plot([p["target_load"] for p in pts], [p[key] for p in pts], marker="o", label=v)
        ax.set_xlabel("total load")
        ax.set_ylabel(label)
    axes[0].legend(fontsize="small")
    fig.savefig(out / "fig8.png")
    fig, ax = plt.subplots()
    for name, times in f9["mean_comm_s"].items():
        ax.plot(f9["long_flows"], [float("nan") if t is None else t for t in times], marker="o", label=name)
    ax.set_xlabel("long flows")
    ax.set_ylabel("aggregation time per iteration (s)")
    ax.legend(fontsize="small")
    fig.savefig(out / "fig9.png")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (name, s) in zip(axes, f10.items()):
        ax.plot(s["time_s"], s["background_bps"], label="background")
        ax.plot(s["time_s"], s["aggregation_bps"], label="aggregation")
        ax.set_title(name)
        ax.set_xlabel("time (s)")
    axes[0].set_ylabel("rate (b/s)")
    axes[0].legend()
    fig.savefig(out / "fig10.png")
    return f"plots: {out}/fig8.png, fig9.png, fig10.png"


def main(args: list[str]) -> int:
    """``shoal sim panama --out DIR [--k K] [--duration T] [--seed S] [--loads ...] [--variants ...]``."""
    import argparse

    p = argparse.ArgumentParser(prog="shoal sim panama", description="Reproduce PANAMA's Figs. 8-10.")
    p.add_argument("--out", type=Path, required=True, help="directory for fig8/9/10.json and plots")
    p.add_argument("--engine", choices=("flow", "packet"), default="flow", help="Fig. 8's engine (default flow)")
    p.add_argument("--k", type=int, default=16, help="fat-tree k for Fig. 8 (default 16, the paper's 1024 hosts)")
    p.add_argument("--duration", default="1s", help="simulated time per Fig. 8 point (default 1s; see docs/sim.md)")
    p.add_argument("--warmup", default="0s", help="left out of every metric at the start (default 0s)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="job and traffic draws (default 1 2 3)")
    p.add_argument("--no-pfc", action="store_true", help="packet engine: drop-tail instead of a lossless fabric")
    p.add_argument("--fig9-engine", choices=("flow", "packet"), default="flow", help="Fig. 9's engine (default flow)")
    p.add_argument("--fig9-duration", default="8s", help="simulated time per Fig. 9 case (default 8s)")
    p.add_argument("--figs", nargs="+", default=["8", "9", "10"], help="which figures (default 8 9 10)")
    p.add_argument("--jobs", type=int, default=None, help="Fig. 8 points at once, in processes (default: cores)")
    p.add_argument("--loads", type=float, nargs="+", default=list(LOADS), help="total loads (default 0.2 .. 0.8)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), help=f"default: {' '.join(VARIANTS)}")
    try:
        ns = p.parse_args(args)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    ns.out.mkdir(parents=True, exist_ok=True)
    seeds = tuple(ns.seeds)
    figures: dict[str, dict[str, Any]] = {}
    try:
        if "8" in ns.figs:
            loads, variants = tuple(ns.loads), tuple(ns.variants)
            pfc = not ns.no_pfc
            figures["fig8"] = fig8(
                ns.k, ns.duration, seeds, loads, variants, ns.jobs, ns.engine, ns.warmup, pfc, records=ns.out
            )
        if "9" in ns.figs:
            figures["fig9"] = fig9(seeds[0], engine=ns.fig9_engine, duration=ns.fig9_duration)
        if "10" in ns.figs:
            figures["fig10"] = fig10()
    except ValueError as e:
        print(f"shoal sim panama: {e}", file=sys.stderr)
        return 2
    for name, data in figures.items():
        (ns.out / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    if len(figures) == 3:
        print(plot(ns.out, figures["fig8"], figures["fig9"], figures["fig10"]), file=sys.stderr)
    if "fig8" in figures:
        print(summary(figures["fig8"]))
    return 0


def summary(f8: dict[str, Any]) -> str:
    """Each point's load offered and carried and its cost, then PANAMA vs ring (ours / the paper's)."""
    lines = []
    for seed, points in f8["points_by_seed"].items():
        for variant, pts in points.items():
            for p in pts:
                rate = p["events_per_cpu_s"]
                lines.append(
                    f"seed {seed} {variant:12s} load {p['target_load']:.2f}: offered {p['total_load']:.2f}, "
                    f"carried {p['carried_load']:.2f}; {p['events'] / 1e6:.1f} M events, {p['cpu_s']:.1f} CPU s"
                    + (f" ({rate / 1e6:.2f} M events/CPU-s)" if rate else "")
                )
    ours = f8.get("ours_vs_ring_at_max_load")
    if ours:
        over = ours["over_seeds"]

        def show(key: str) -> str:
            s = over[key]
            if s is None:
                return f"{key} n/a / {PAPER[key]}x"
            return f"{key} {s['geomean']:.2f}x ({s['min']:.2f}-{s['max']:.2f}) / {PAPER[key]}x"

        lines.append(
            f"PANAMA vs ring at the highest load over {len(f8['seeds'])} seeds, geometric mean (spread) "
            f"ours / paper: {', '.join(show(key) for key in PAPER)}; {over['jobs_compared']} job comparisons"
        )
    # Degenerate points (docs/sim.md, "Files"): why the numbers above may not be a result.
    lines += [f"warning: {w}" for w in f8.get("warnings", [])]
    return "\n".join(lines)
