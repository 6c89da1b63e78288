"""``shoal sim validate``: hold the simulator against the emulated testbed.

Measures one-collective times on ``shoal testbed`` (through ``shoal testbed
bench``, the same worker loop and timing as every benchmark) or reads saved
measurements, simulates the same calls with ``shoal sim plan`` on the
matching topology (``star:hosts=N``, the testbed's link rate, the measured
per-link latency, the shaped ports' queue) with each engine, and prints the
table measured vs simulated vs error::

    python -m shoal.sim.validate                          # saved measurements (testbed_measured.json)
    python -m shoal.sim.validate --testbed sv --hosts 4   # measure now on testbed 'sv' (must be up)
    shoal sim validate --out DIR                          # also writes DIR/validate.json and DIR/validate.md

The packet engine runs twice: as is, and with the hosts' software time per
message (``--host-overhead``), calibrated on the same placement by an 8-byte
ring allreduce: its measured time over its 2(ranks - 1) steps.

Error = (simulated - measured) / measured. docs/sim.md ("Against the
testbed") explains the parameters and every error over 15%.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.sim import ENGINES, plan

#: Measurements saved from the 2-vCPU dev VM (see docs/sim.md, "Against the testbed").
SAVED = Path(__file__).with_name("testbed_measured.json")

#: The bar of issue 15: simulated within this fraction of measured.
BAR = 0.15

#: Size of the ring allreduce that calibrates the host overhead: all software, no bandwidth.
CALIBRATION_BYTES = 8


@dataclass(frozen=True)
class Case:
    """One measured configuration: a collective with one algorithm on hosts x ranks_per_host."""

    collective: str
    algo: str
    hosts: int
    ranks_per_host: int = 1

    @property
    def ranks(self) -> int:
        return self.hosts * self.ranks_per_host

    def label(self) -> str:
        return f"{self.collective} {self.algo} {self.hosts}x{self.ranks_per_host}"


@dataclass(frozen=True)
class SimParams:
    """The simulated testbed: rate of every link, per-link latency, queue of a shaped port."""

    link: str = "1gbit"
    #: One veth hop, measured: `shoal testbed check` gives a 14 us RTT (4 link crossings
    #: and both hosts' stacks) for 1-byte TCP ping-pongs on the 2-vCPU dev VM.
    latency: str = "3500ns"
    #: 1000 packets (the pfifo under each HTB class, the veth's txqueuelen) of 1500 bytes.
    buffer: str = "1500KB"


def default_cases(hosts: int) -> list[Case]:
    """The issue's set: allreduce ring, rabenseifner, ina at 1 rank per host, hierarchical at 2,
    pipelined-chain broadcast."""
    return [
        Case("allreduce", "ring", hosts),
        Case("allreduce", "rabenseifner", hosts),
        Case("allreduce", "ina", hosts),
        Case("allreduce", "hierarchical", hosts, 2),
        Case("broadcast", "pipelined_chain", hosts),
    ]


def parse_size(text: str) -> int:
    """'1M', '4MiB', '16777216' -> bytes (binary units, as ``shoal bench --sizes``)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in "KMG" else t
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"bad size {text!r}: expected e.g. 1M, 4MiB, 1048576")
    return int(digits) * mult


# ------------------------------------------------------------------------------- measuring


def measure(
    testbed: str, cases: list[Case], sizes: list[int], repeats: int, iters: int, timeout: float = 600
) -> dict[str, Any]:
    """Runs ``shoal testbed bench`` on `testbed`, one job per (collective, placement), and per
    placement the 8-byte ring calibration (inside the ring allreduce job where there is one).
    Returns ``{"calibration": [...], "records": [...]}``, one record per (case, size) with the
    median and min seconds per call."""
    groups: dict[tuple[str, int, int], list[Case]] = {}
    for c in cases:
        groups.setdefault((c.collective, c.hosts, c.ranks_per_host), []).append(c)
    records: list[dict[str, Any]] = []
    for hosts, rph in sorted({(h, r) for _, h, r in groups}):
        if not any(c.algo == "ring" for c in groups.get(("allreduce", hosts, rph), [])):
            records += _bench(testbed, "allreduce", hosts, rph, [CALIBRATION_BYTES], ["ring"], repeats, iters, timeout)
    for (collective, hosts, rph), group in groups.items():
        job_sizes = sorted({*sizes, CALIBRATION_BYTES}) if collective == "allreduce" else sizes
        records += _bench(testbed, collective, hosts, rph, job_sizes, [c.algo for c in group], repeats, iters, timeout)
    calibration = [
        {"hosts": r["hosts"], "ranks_per_host": r["ranks_per_host"], "ring_8B_s": r["median_s"]}
        | {"steps": (steps := 2 * (r["hosts"] * r["ranks_per_host"] - 1)), "host_overhead_s": r["median_s"] / steps}
        for r in records
        if r["bytes"] == CALIBRATION_BYTES and r["collective"] == "allreduce" and r["algo"] == "ring"
    ]
    kept = [r for r in records if r["bytes"] != CALIBRATION_BYTES or CALIBRATION_BYTES in sizes]
    return {"calibration": calibration, "records": kept}


def _bench(
    testbed: str,
    collective: str,
    hosts: int,
    rph: int,
    sizes: list[int],
    algos: list[str],
    repeats: int,
    iters: int,
    timeout: float,
) -> list[dict[str, Any]]:
    """One ``shoal testbed bench`` job; its records."""
    with tempfile.TemporaryDirectory(prefix="shoal-validate-") as tmp:
        argv = [sys.executable, "-m", "shoal.cli", "testbed", "bench", "--name", testbed]
        argv += ["--hosts", str(hosts), "--ranks-per-host", str(rph), collective]
        argv += ["--sizes", ",".join(str(s) for s in sizes), "--algo", ",".join(algos)]
        argv += ["--repeats", str(repeats), "--iters", str(iters), "--out", tmp]
        argv += ["--no-roofline", "--no-plot", "--no-progress"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[2:])} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        return bench_records(json.loads((Path(tmp) / "results.json").read_text()))


def bench_records(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-(algorithm, size) records of one ``shoal testbed bench`` results.json."""
    tb = results["testbed"]
    out = []
    for series in results["series"]:
        if series["library"] != "shoal" or series["status"] != "ok":
            raise RuntimeError(f"{series['label']}: {series['status']} {series.get('failure') or ''}")
        for r in series["results"]:
            out.append(
                {
                    "collective": results["collective"],
                    "algo": series["algo"],
                    "hosts": tb["hosts"],
                    "ranks_per_host": tb["ranks_per_host"],
                    "bytes": r["size"],
                    "median_s": r["time_us"] / 1e6,
                    "min_s": r["min_us"] / 1e6,
                    "samples": len(r["samples_us"]),
                    "iters": r["iters"],
                    "errors": r["errors"],
                    "load_average": results["machine"]["load_average"][0],
                }
            )
    return out


# ------------------------------------------------------------------------------- simulating


def simulate(case: Case, nbytes: int, engine: str, params: SimParams, host_overhead_s: float = 0.0) -> float:
    """Simulated seconds of one call of `case` with `nbytes` per rank (`host_overhead_s`: packet engine)."""
    r = plan(
        case.collective,
        algo=case.algo,
        ranks=case.ranks,
        size=nbytes,
        topology=f"star:hosts={case.hosts}",
        link=params.link,
        latency=params.latency,
        buffer=params.buffer,
        engine=engine,
        ranks_per_host=case.ranks_per_host,
        host_overhead=f"{round(host_overhead_s * 1e9)}ns" if host_overhead_s > 0 else None,
    )
    return float(r["time_s"])


#: The model columns: (name, engine, whether it charges the calibrated host overhead).
MODELS = (("packet", "packet", False), ("packet+o", "packet", True), ("flow", "flow", False))


def models(engines: list[str], calibrated: bool) -> list[tuple[str, str, bool]]:
    """The model columns to show for these engines (packet+o only with a calibration)."""
    return [m for m in MODELS if m[1] in engines and (calibrated or not m[2])]


def compare(
    measured: dict[str, Any], engines: list[str], params: SimParams
) -> tuple[list[dict[str, Any]], list[tuple[str, str, bool]]]:
    """Each measured record with its simulated time and error per model column."""
    overhead = {(c["hosts"], c["ranks_per_host"]): c["host_overhead_s"] for c in measured.get("calibration", [])}
    cols = models(engines, bool(overhead))
    rows = []
    for rec in measured["records"]:
        case = Case(rec["collective"], rec["algo"], rec["hosts"], rec["ranks_per_host"])
        row = dict(rec)
        o = overhead.get((case.hosts, case.ranks_per_host), 0.0)
        for name, engine, with_o in cols:
            # The aggregation protocol is modelled packet by packet, not as messages: no per-message cost.
            t = simulate(case, rec["bytes"], engine, params, o if with_o and case.algo != "ina" else 0.0)
            row[f"{name}_s"] = t
            row[f"{name}_err"] = (t - rec["median_s"]) / rec["median_s"]
        rows.append(row)
    return rows, cols


# ------------------------------------------------------------------------------- reporting


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} B"


def table(rows: list[dict[str, Any]], engines: list[str]) -> str:
    """The comparison as a markdown table; `engines` are model column names (packet, packet+o, flow)."""
    # Times in ms; errors over the bar in bold.
    head = ["case", "size", "measured median (min) ms"]
    for e in engines:
        head += [f"{e} ms", f"{e} error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            Case(r["collective"], r["algo"], r["hosts"], r["ranks_per_host"]).label(),
            _size(r["bytes"]),
            f"{r['median_s'] * 1e3:.2f} ({r['min_s'] * 1e3:.2f})",
        ]
        for e in engines:
            err = r[f"{e}_err"]
            pct = f"{err * 100:+.1f}%"
            cells += [f"{r[f'{e}_s'] * 1e3:.2f}", f"**{pct}**" if abs(err) > BAR else pct]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]], engines: list[str]) -> str:
    """Per model column: how many rows meet the bar, median and max error."""
    out = []
    for e in engines:
        errs = [abs(r[f"{e}_err"]) for r in rows]
        within = sum(x <= BAR for x in errs)
        out.append(
            f"{e} engine: {within} of {len(errs)} within {BAR:.0%}; "
            f"median |error| {sorted(errs)[len(errs) // 2] * 100:.1f}%, max {max(errs) * 100:.1f}%"
        )
    return "\n".join(out)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="shoal sim validate", description=__doc__.split("\n\n")[0])
    p.add_argument("--testbed", help="measure now on this testbed (up, with --switch for ina); default: saved")
    p.add_argument("--measured", type=Path, default=SAVED, help=f"saved measurements (default {SAVED.name})")
    p.add_argument("--hosts", type=int, default=4, help="hosts to measure on (default 4)")
    p.add_argument("--sizes", default="1M,4M,16M", help="bytes per rank, comma-separated (default 1M,4M,16M)")
    p.add_argument("--algos", help="only these algorithms (comma-separated; default all of the set)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per size, median reported (default 7)")
    p.add_argument("--iters", type=int, default=5, help="calls per repeat (default 5)")
    p.add_argument("--engines", default=",".join(ENGINES), help="simulation engines (default packet,flow)")
    p.add_argument("--latency", default=SimParams.latency, help=f"simulated per-link latency ({SimParams.latency})")
    p.add_argument("--buffer", default=SimParams.buffer, help=f"simulated port buffer ({SimParams.buffer})")
    p.add_argument("--out", type=Path, help="write validate.json (measured + simulated) and validate.md here")
    p.add_argument("--save", type=Path, help="write the measurements (to reuse with --measured)")
    try:
        ns = p.parse_args(argv)
        sizes = [parse_size(s) for s in ns.sizes.split(",")]
        engines = [e.strip() for e in ns.engines.split(",") if e.strip()]
        bad = [e for e in engines if e not in ENGINES]
        if bad or not engines:
            raise ValueError(f"unknown engine(s) {bad}; valid: {', '.join(ENGINES)}")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    except ValueError as e:
        print(f"shoal sim validate: {e}", file=sys.stderr)
        return 2
    params = SimParams(latency=ns.latency, buffer=ns.buffer)
    measured: dict[str, Any]
    if ns.testbed:
        cases = default_cases(ns.hosts)
        if ns.algos:
            wanted = set(ns.algos.split(","))
            cases = [c for c in cases if c.algo in wanted]
        try:
            measured = measure(ns.testbed, cases, sizes, ns.repeats, ns.iters)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"shoal sim validate: measuring failed: {e}", file=sys.stderr)
            return 1
        if ns.save:
            ns.save.write_text(json.dumps({"machine": "2-vCPU dev VM"} | measured, indent=1) + "\n")
    else:
        try:
            measured = json.loads(ns.measured.read_text())
            measured["records"] = [
                r
                for r in measured["records"]
                if r["bytes"] in sizes and (not ns.algos or r["algo"] in ns.algos.split(","))
            ]
        except (OSError, ValueError, KeyError) as e:
            print(f"shoal sim validate: cannot read measurements {ns.measured}: {e}", file=sys.stderr)
            return 2
    if not measured["records"]:
        print("shoal sim validate: no measurements match", file=sys.stderr)
        return 2
    try:
        rows, cols = compare(measured, engines, params)
    except ValueError as e:
        print(f"shoal sim validate: simulating failed: {e}", file=sys.stderr)
        return 2
    names = [name for name, _, _ in cols]
    calib = "".join(
        f"; host overhead {c['hosts']}x{c['ranks_per_host']}: {c['host_overhead_s'] * 1e6:.0f} us "
        f"(8 B ring {c['ring_8B_s'] * 1e3:.2f} ms / {c['steps']} steps)"
        for c in measured.get("calibration", [])
    )
    text = (
        f"simulated: star:hosts=N, link {params.link}, latency {params.latency}, buffer {params.buffer}{calib}; "
        f"error = (simulated - measured) / measured\n\n{table(rows, names)}\n\n{summary(rows, names)}"
    )
    print(text)
    if ns.out:
        ns.out.mkdir(parents=True, exist_ok=True)
        report = {"params": vars(params), "calibration": measured.get("calibration", []), "rows": rows}
        (ns.out / "validate.json").write_text(json.dumps(report, indent=1) + "\n")
        (ns.out / "validate.md").write_text(text + "\n")
    bad_rows = [r for r in rows for e in names if not math.isfinite(r[f"{e}_s"])]
    return 1 if bad_rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
