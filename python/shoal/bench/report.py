"""Tables (nccl-tests style), ratios, the JSON document and the plots."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from shoal.bench import check
from shoal.bench.runners import JobResult
from shoal.bench.sizes import human

NO_OP = ("broadcast", "allgather", "alltoall")
#: sizes from which busbw is also shown as a fraction of the memory roofline
ROOFLINE_FROM = 1 << 20


def ceiling(doc: dict[str, Any]) -> tuple[str, float | None, int]:
    """What busbw is compared with: (column name, GB/s, from which size). On the testbed the
    link's goodput, elsewhere the memory roofline of one process (None when not measured)."""
    tb = doc.get("testbed")
    if tb:
        return "%link", tb.get("link_goodput_gbps"), 0
    return "%memcpy", (doc.get("roofline") or {}).get("per_process_gbps"), ROOFLINE_FROM


def where(doc: dict[str, Any]) -> str:
    """How the ranks were placed: '8 ranks', or '8 ranks on 4 hosts x 2 (testbed, 1gbit)'."""
    tb = doc.get("testbed")
    text = f"{doc['nranks']} ranks"
    if tb:
        text += f" on {tb['hosts']} hosts x {tb['ranks_per_host']} ({tb['link']['rate']} links"
        text += f", delay {tb['link']['delay']}" if tb["link"]["delay_s"] else ""
        text += ", INA switch)" if tb.get("switch") else ")"
    return text


def series_label(s: dict[str, Any]) -> str:
    if s["library"] == "shoal":
        return f"shoal {s['algo']}" if s["algo"] else "shoal (auto)"
    library: str = s["library"]
    return {"mpi": "OpenMPI", "gloo": "Gloo"}.get(library, library)


def merge_series(
    name: str, library: str, algo: str | None, jobs: list[JobResult], collective: str, nranks: int, dtype: str, op: str
) -> dict[str, Any]:
    """One library's (or shoal algorithm's) figures, pooled over rounds."""
    by_size: dict[int, dict[str, Any]] = {}
    for job in jobs:
        for r in job.results:
            d = by_size.setdefault(
                r["size"],
                {
                    "size": r["size"],
                    "count": r["count"],
                    "dtype": dtype,
                    "op": op if collective not in NO_OP else None,
                    "iters": r["iters"],
                    "warmup": r["warmup"],
                    "samples_us": [],
                    "errors": None,
                    "algo": r.get("algo"),
                    "ran_unix": [],  # [start, end] of each timed repeat (wall clock, rank 0)
                },
            )
            d["samples_us"].extend(r["samples_us"])
            d["ran_unix"].extend(r.get("repeats_unix", []))
            if r.get("errors") is not None:
                d["errors"] = (d["errors"] or 0) + int(r["errors"])
    factor = check.BUS_FACTOR[collective](nranks)
    results = []
    for size in sorted(by_size):
        d = by_size[size]
        t = statistics.median(d["samples_us"])
        d["time_us"] = t
        d["min_us"] = min(d["samples_us"])
        d["max_us"] = max(d["samples_us"])
        d["algbw_gbps"] = size / t / 1e3 if t > 0 else 0.0
        d["busbw_gbps"] = d["algbw_gbps"] * factor
        results.append(d)
    failed = [j for j in jobs if j.returncode != 0]
    start = next((j.start for j in jobs if j.start), {})
    info = {k: v for k, v in start.items() if k not in ("type", "spec", "library", "nranks")}
    unsupported = next((j.unsupported for j in jobs if j.unsupported), None)
    status = "failed" if failed else ("unsupported" if unsupported and not results else "ok")
    return {
        "name": name,
        "library": library,
        "algo": algo,
        "label": "",
        "status": status,
        "unsupported": unsupported,
        "failure": (
            {"returncode": failed[0].returncode, "log": failed[0].log, "log_tail": failed[0].log_tail[-3000:]}
            if failed
            else None
        ),
        "info": info,
        "seconds": sum(j.seconds for j in jobs),
        "results": results,
    }


def reference(series: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The shoal series others are compared with: automatic selection if run, else the first algorithm."""
    shoals = [s for s in series if s["library"] == "shoal" and s["results"]]
    auto = [s for s in shoals if s["algo"] is None]
    return (auto or shoals)[0] if auto or shoals else None


def paired_ratio(samples: list[float], ref_samples: list[float]) -> float | None:
    """The median of ``samples[i] / ref_samples[i]``: repeats that took their
    turns together (``--interleave repeat``) compared pair by pair, so a
    change in the machine's speed between turns does not fall on one side
    only. None unless every repeat has its pair."""
    if not samples or len(samples) != len(ref_samples) or min(ref_samples) <= 0:
        return None
    return statistics.median(a / b for a, b in zip(samples, ref_samples))


def ratios(series: list[dict[str, Any]], paired: bool = False) -> dict[str, Any]:
    """time(other) / time(shoal) per size; > 1 means shoal is faster. With
    `paired` (repeats that took turns), also the median of the ratios of
    repeats that ran together (``paired_ratio``)."""
    ref = reference(series)
    out: dict[str, Any] = {"reference": ref["name"] if ref else None, "definition": "time(other) / time(shoal)"}
    if ref is None:
        out["others"] = {}
        return out
    by_size = {r["size"]: r for r in ref["results"] if r["time_us"] > 0}
    others = {}
    for s in series:
        if s["library"] == "shoal" or not s["results"]:
            continue
        rows = []
        for r in s["results"]:
            mine = by_size.get(r["size"])
            if mine is None:
                continue
            row = {
                "size": r["size"],
                "shoal_us": mine["time_us"],
                "other_us": r["time_us"],
                "ratio": r["time_us"] / mine["time_us"],
            }
            if paired:
                row["paired_ratio"] = paired_ratio(r["samples_us"], mine["samples_us"])
            rows.append(row)
        others[s["name"]] = {"rows": rows, **_ratio_summary(rows)}
    out["others"] = others
    return out


def _ratio_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {}
    worst = min(rows, key=lambda r: r["ratio"])
    summary: dict[str, Any] = {
        "min": worst["ratio"],
        "min_at": worst["size"],
        "max": max(r["ratio"] for r in rows),
        "geomean": math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows)),
    }
    for label, lo in (("min_from_64KiB", 64 << 10), ("min_from_16MiB", 16 << 20)):
        sel = [r["ratio"] for r in rows if r["size"] >= lo]
        if sel:
            summary[label] = min(sel)
    pairs = [r for r in rows if r.get("paired_ratio") is not None]
    if pairs:
        worst = min(pairs, key=lambda r: r["paired_ratio"])
        summary["paired_min"], summary["paired_min_at"] = worst["paired_ratio"], worst["size"]
    return summary


def algorithm_table(series: list[dict[str, Any]], paired: bool = False) -> dict[str, Any] | None:
    """With several shoal series: each one's time per size and the fastest;
    with the automatic choice among them, its time over the fastest forced
    algorithm's (``auto_over_fastest``; with `paired`, also the median of
    the ratios of repeats that ran together)."""
    shoals = [s for s in series if s["library"] == "shoal" and s["results"]]
    if len(shoals) < 2:
        return None
    auto = next((s["name"] for s in shoals if s["algo"] is None), None)
    results = {s["name"]: {r["size"]: r for r in s["results"]} for s in shoals}
    sizes = sorted({size for by_size in results.values() for size in by_size})
    rows = []
    for size in sizes:
        times = {n: (by_size[size]["time_us"] if size in by_size else None) for n, by_size in results.items()}
        known = {k: v for k, v in times.items() if v is not None}
        row: dict[str, Any] = {
            "size": size,
            "times_us": times,
            "fastest": min(known, key=lambda k: known[k]) if known else None,
        }
        forced = {k: v for k, v in known.items() if k != auto}
        if auto in known and forced and known[auto] > 0:
            best = min(forced, key=lambda k: forced[k])
            row["fastest_forced"] = best
            row["auto_over_fastest"] = known[auto] / forced[best]
            if paired:
                row["auto_over_fastest_paired"] = paired_ratio(
                    results[auto][size]["samples_us"], results[best][size]["samples_us"]
                )
        rows.append(row)
    return {"series": [s["name"] for s in shoals], "automatic": auto, "rows": rows}


# ---------------------------------------------------------------- text


def _fmt_time(us: float) -> str:
    return f"{us:12.2f}" if us < 1e5 else f"{us:12.0f}"


def series_table(s: dict[str, Any], doc: dict[str, Any]) -> str:
    coll = doc["collective"]
    info = s.get("info", {})
    head = f"# {series_label(s)} | {coll} | {where(doc)} | {doc['dtype']}"
    if coll not in NO_OP:
        head += f" {doc['op']}"
    if s["library"] == "shoal":
        head += f" | transport {info.get('transport', 'auto')}"
    elif info.get("version"):
        head += f" | {info['version']}"
    lines = [head]
    if s["status"] == "failed":
        f = s["failure"]
        lines.append(f"#   FAILED (exit code {f['returncode']}); log: {f['log']}")
        for line in f["log_tail"].strip().splitlines()[-6:]:
            lines.append(f"#   | {line}")
    if s["unsupported"]:
        lines.append(f"#   unsupported: {s['unsupported']}")
    if not s["results"]:
        return "\n".join(lines)
    column, roof, pct_from = ceiling(doc)
    lines.append(
        f"#{'size(B)':>13} {'count':>12} {'type':>9} {'redop':>6} {'time(us)':>12} {'algbw(GB/s)':>12} "
        f"{'busbw(GB/s)':>12} {'errors':>7} {column:>8}  algo"
    )
    for r in s["results"]:
        pct = f"{100 * r['busbw_gbps'] / roof:7.0f}%" if roof and r["size"] >= pct_from else f"{'-':>8}"
        errors = "-" if r["errors"] is None else str(r["errors"])
        lines.append(
            f"{r['size']:>14} {r['count']:>12} {r['dtype']:>9} {r['op'] or 'none':>6} {_fmt_time(r['time_us'])} "
            f"{r['algbw_gbps']:>12.3f} {r['busbw_gbps']:>12.3f} {errors:>7} {pct}  {r['algo'] or ''}"
        )
    return "\n".join(lines)


def ratio_table(doc: dict[str, Any]) -> str:
    rat = doc["ratios"]
    if not rat["reference"] or not rat["others"]:
        return ""
    ref = next(s for s in doc["series"] if s["name"] == rat["reference"])
    names = list(rat["others"])
    paired = any(row.get("paired_ratio") is not None for n in names for row in rat["others"][n]["rows"])
    lines = [
        f"# speedup of {series_label(ref)}: time(other) / time(shoal) per size, medians over repeats; "
        "> 1 means shoal is faster"
        + ("; paired: the median of the ratios of repeats that ran in the same turn" if paired else ""),
        f"#{'size(B)':>13} {'size':>8} {'shoal(us)':>12}"
        + "".join(f" {n + '(us)':>12} {n + '/shoal':>11}" + (f" {'paired':>8}" if paired else "") for n in names),
    ]
    sizes = [r["size"] for r in ref["results"]]
    per = {n: {row["size"]: row for row in rat["others"][n]["rows"]} for n in names}
    for size in sizes:
        t = next(r["time_us"] for r in ref["results"] if r["size"] == size)
        line = f"{size:>14} {human(size):>8} {_fmt_time(t)}"
        for n in names:
            row = per[n].get(size)
            line += f" {_fmt_time(row['other_us'])} {row['ratio']:>10.2f}x" if row else f" {'-':>12} {'-':>11}"
            if paired:
                pr = row.get("paired_ratio") if row else None
                line += f" {pr:>7.2f}x" if pr is not None else f" {'-':>8}"
        lines.append(line)
    for n in names:
        sm = rat["others"][n]
        if not sm.get("rows"):
            continue
        text = (
            f"# {n}/shoal: min {sm['min']:.2f}x (at {human(sm['min_at'])}), geomean {sm['geomean']:.2f}x, "
            f"max {sm['max']:.2f}x"
        )
        if "min_from_64KiB" in sm:
            text += f"; min from 64 KiB {sm['min_from_64KiB']:.2f}x"
        if "min_from_16MiB" in sm:
            text += f"; min from 16 MiB {sm['min_from_16MiB']:.2f}x"
        if "paired_min" in sm:
            text += f"; paired min {sm['paired_min']:.2f}x (at {human(sm['paired_min_at'])})"
        lines.append(text)
    return "\n".join(lines)


def algo_text(doc: dict[str, Any]) -> str:
    at = doc.get("algorithms")
    if not at:
        return ""
    names = at["series"]
    paired = any(row.get("auto_over_fastest_paired") is not None for row in at["rows"])
    ratio_head = ""
    if at.get("automatic"):
        ratio_head = f" {'auto/fastest':>13}" + (f" {'paired':>7}" if paired else "")
    lines = [
        "# shoal algorithms: time (us) per size; * marks the fastest; auto/fastest: the automatic choice's time "
        "over the fastest forced algorithm's"
        + ("; paired: the median of the ratios of repeats that ran together" if paired else ""),
        f"#{'size(B)':>13}" + "".join(f" {n:>22}" for n in names) + ratio_head,
    ]
    for row in at["rows"]:
        line = f"{row['size']:>14}"
        for n in names:
            t = row["times_us"][n]
            cell = "-" if t is None else f"{t:.2f}" + ("*" if n == row["fastest"] else " ")
            line += f" {cell:>22}"
        if ratio_head:
            r, pr = row.get("auto_over_fastest"), row.get("auto_over_fastest_paired")
            line += f" {r:>12.2f}x" if r is not None else f" {'-':>13}"
            if paired:
                line += f" {pr:>6.2f}x" if pr is not None else f" {'-':>7}"
        lines.append(line)
    return "\n".join(lines)


def text_report(doc: dict[str, Any]) -> str:
    parts = [f"# shoal bench {doc['collective']}: {where(doc)}, {doc['dtype']}; {doc['command']}"]
    m = doc["machine"]
    parts[0] += (
        f"\n# machine: {m.get('cpu', '?')}, {m.get('cpus', '?')} cpus, {m.get('memory', '?')}, {m.get('os', '?')}"
    )
    load = [m.get("load_average", [0])[0], m.get("load_average_end", [0])[0]]
    cpus = m.get("cpus_usable") or m.get("cpus") or 1
    parts[0] += (
        f"\n# load average (1 min) before the run {load[0]:.2f}, after it {load[1]:.2f} "
        f"(includes the benchmark's own ranks), on {cpus} cpus"
    )
    if load[0] > 0.5 * cpus:
        parts[0] += "\n# note: other work was running on the machine; figures are noisy (--rounds helps)"
    if doc.get("roofline"):
        from shoal.bench.roofline import describe

        parts.append("# " + describe(doc["roofline"]))
    tb = doc.get("testbed")
    if tb and tb.get("link_goodput_gbps"):
        parts.append(
            f"# testbed {tb['name']!r}: link goodput {tb['link_goodput_gbps']:.4f} GB/s (rate less framing); "
            f"%link = busbw / that; emulated: {', '.join(f'{k} {v}' for k, v in tb['emulated'].items()) or 'rate'}"
        )
    parts += [series_table(s, doc) for s in doc["series"]]
    for extra in (ratio_table(doc), algo_text(doc)):
        if extra:
            parts.append(extra)
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------- plots


def plot(doc: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """algbw.png (algbw vs size, log-log) and, with competitors, speedup.png; {} without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    files = {}
    title = f"{doc['collective']}, {where(doc)}, {doc['dtype']}"
    colors = {"gloo": "tab:orange", "mpi": "tab:green"}
    fig, ax = plt.subplots(figsize=(8, 5))
    shoal_styles = iter(["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1))])
    for s in doc["series"]:
        if not s["results"]:
            continue
        xs = [r["size"] for r in s["results"]]
        ys = [max(r["algbw_gbps"], 1e-9) for r in s["results"]]
        if s["library"] == "shoal":
            style = dict(color="tab:blue", linestyle=next(shoal_styles, "-"), linewidth=2.2 if not s["algo"] else 1.3)
        else:
            style = dict(color=colors.get(s["library"], None), linestyle="-", linewidth=1.8)
        ax.plot(xs, ys, marker="o", markersize=3, label=series_label(s), **style)
    roof = doc.get("roofline")
    if roof:
        ax.axhline(roof["per_process_gbps"], color="gray", linestyle=":", linewidth=1.2)
        ax.text(
            max(doc["sizes_bytes"]),
            roof["per_process_gbps"] * 1.1,
            f"memcpy per process, {doc['nranks']} processes at once: {roof['per_process_gbps']:.1f} GB/s",
            color="gray",
            fontsize=8,
            ha="right",
        )
    link = (doc.get("testbed") or {}).get("link_goodput_gbps")
    if link:
        ax.axhline(link, color="gray", linestyle=":", linewidth=1.2)
        ax.text(
            max(doc["sizes_bytes"]), link * 1.1, f"link goodput {link:.3f} GB/s", color="gray", fontsize=8, ha="right"
        )
    _log_axes(ax, doc, "algbw (GB/s)", f"shoal bench: {title}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = out_dir / "algbw.png"
    _save(fig, path)
    plt.close(fig)
    files["algbw"] = path.name

    rat = doc["ratios"]
    if rat["reference"] and rat["others"]:
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, data in rat["others"].items():
            s = next(x for x in doc["series"] if x["name"] == name)
            ax.plot(
                [r["size"] for r in data["rows"]],
                [r["ratio"] for r in data["rows"]],
                marker="o",
                markersize=3,
                color=colors.get(s["library"]),
                label=f"{series_label(s)} time / shoal time",
            )
        ax.axhline(1.0, color="black", linewidth=1)
        _log_axes(ax, doc, "speedup of shoal (>1: shoal faster)", f"shoal speedup: {title}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / "speedup.png"
        _save(fig, path)
        plt.close(fig)
        files["speedup"] = path.name
    return files


def _log_axes(ax: Any, doc: dict[str, Any], ylabel: str, title: str) -> None:
    """Log-log axes over the benchmark's sizes, labelled and gridded."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    _size_ticks(ax, doc["sizes_bytes"])


def _save(fig: Any, path: Path) -> None:
    """A small PNG: 90 dpi, then (with Pillow, which matplotlib brings) a 64-colour palette."""
    fig.savefig(path, dpi=90)
    try:
        from PIL import Image

        with Image.open(path) as im:
            small = im.convert("RGB").quantize(colors=64)
        small.save(path, optimize=True)
    except (ImportError, OSError):
        pass


def _size_ticks(ax: Any, sizes: list[int]) -> None:
    """A labelled tick on every size, or on every other one when there are many."""
    if not sizes:
        return
    ticks = sorted(sizes)
    if len(ticks) > 12:
        ticks = ticks[:: max(1, round(len(ticks) / 12))]
    ax.set_xticks(ticks)
    ax.set_xticklabels([human(x).replace(" ", "") for x in ticks], fontsize=7, rotation=45)
    ax.xaxis.set_minor_locator(matplotlib_null_locator())


def matplotlib_null_locator() -> Any:
    from matplotlib.ticker import NullLocator

    return NullLocator()


# ---------------------------------------------------------------- markdown


def markdown_report(doc: dict[str, Any]) -> str:
    """The same figures as markdown (``table.md``): speedups, then each library's table."""
    m = doc["machine"]
    lines = [
        f"`{doc['command']}`",
        "",
        f"{doc['collective']}, {where(doc)}, {doc['dtype']}"
        + (f" {doc['op']}" if doc["collective"] not in NO_OP else "")
        + f"; machine: {m.get('cpu', '?')}, {m.get('cpus_usable', m.get('cpus', '?'))} cpus; "
        f"load average {m.get('load_average', ['?'])[0]} before the run, "
        f"{m.get('load_average_end', ['?'])[0]} after it (with the benchmark's own ranks)",
    ]
    if doc.get("roofline"):
        r = doc["roofline"]
        lines += [
            "",
            f"Memory roofline: {r['concurrent']['processes']} processes copying 64 MiB at once: "
            f"{r['per_process_gbps']:.2f} GB/s each, {r['aggregate_gbps']:.2f} GB/s aggregate "
            f"(one process alone: {r['single_gbps']:.2f} GB/s).",
        ]
    rat = doc["ratios"]
    series = {s["name"]: s for s in doc["series"]}
    if rat["reference"] and rat["others"]:
        ref = series[rat["reference"]]
        names = list(rat["others"])
        paired = any(row.get("paired_ratio") is not None for n in names for row in rat["others"][n]["rows"])
        lines += [
            "",
            "Speedup = time(other) / time(shoal), medians over repeats"
            + ("; paired: the median of the ratios of repeats that ran in the same turn" if paired else "")
            + "; **> 1 means shoal is faster**.",
            "",
            "| size | shoal (us) | "
            + " | ".join(
                f"{series_label(series[n])} (us) | {series_label(series[n])}/shoal" + (" | paired" if paired else "")
                for n in names
            )
            + " |",
            "|---:|---:|" + ("---:|---:|" + ("---:|" if paired else "")) * len(names),
        ]
        per = {n: {row["size"]: row for row in rat["others"][n]["rows"]} for n in names}
        for r in ref["results"]:
            cells = [human(r["size"]), f"{r['time_us']:.1f}"]
            for n in names:
                row = per[n].get(r["size"])
                cells += [f"{row['other_us']:.1f}", f"{row['ratio']:.2f}x"] if row else ["-", "-"]
                if paired:
                    pr = row.get("paired_ratio") if row else None
                    cells.append("-" if pr is None else f"{pr:.2f}x")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for n in names:
            sm = rat["others"][n]
            if sm.get("rows"):
                lines.append(
                    f"- {series_label(series[n])}/shoal: min {sm['min']:.2f}x at {human(sm['min_at'])}, "
                    f"geomean {sm['geomean']:.2f}x, max {sm['max']:.2f}x"
                )
    at = doc.get("algorithms")
    if at:
        labels = [series_label(series[n]) for n in at["series"]]
        lines += ["", "shoal's algorithms, time (us) per size; **bold** is the fastest:", ""]
        lines += ["| size | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
        for row in at["rows"]:
            cells = [human(row["size"])]
            for n in at["series"]:
                t = row["times_us"][n]
                cells.append("-" if t is None else f"**{t:.1f}**" if n == row["fastest"] else f"{t:.1f}")
            lines.append("| " + " | ".join(cells) + " |")
    column, roof, pct_from = ceiling(doc)
    for s in doc["series"]:
        lines += ["", f"<details><summary>{series_label(s)}: nccl-tests style table</summary>", ""]
        if s["status"] != "ok" or s["unsupported"]:
            lines.append(f"status: {s['status']} {s['unsupported'] or ''}")
        lines += [
            f"| size (B) | count | type | redop | time (us) | algbw (GB/s) | busbw (GB/s) | errors | {column} | algo |",
            "|---:|---:|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in s["results"]:
            pct = f"{100 * r['busbw_gbps'] / roof:.0f}%" if roof and r["size"] >= pct_from else "-"
            lines.append(
                f"| {r['size']} | {r['count']} | {r['dtype']} | {r['op'] or 'none'} | {r['time_us']:.2f} | "
                f"{r['algbw_gbps']:.3f} | {r['busbw_gbps']:.3f} | {r['errors']} | {pct} | {r['algo'] or ''} |"
            )
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
