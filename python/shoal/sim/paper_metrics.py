"""PANAMA's own comparisons between variants (section 7), from Fig. 8 points.

The simulator reports per point what one run measured (with warm-up left out and PANAMA's
flow buckets: short < 40 MB <= long). Here the variants are compared as the paper does:

* training time *per job*, over the jobs whose gradients PANAMA aggregates (> 40 MB) and that
  finished an iteration in both runs, as the ratio baseline / variant per job, summarised by
  the geometric mean and the spread (min, max) of those ratios;
* p99 FCT of short flows and long-flow throughput as ratios of the two runs' figures;
* over several seeds: each ratio per seed, then their geometric mean and spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values (ratios average this way: 2x and 0.5x give 1x)."""
    if not values:
        raise ValueError("geometric mean of nothing")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def spread(values: Sequence[float]) -> dict[str, float]:
    """Geometric mean, min and max of ratios, and how many there were."""
    return {"geomean": geomean(values), "min": min(values), "max": max(values), "n": len(values)}


def training_time_ratios(baseline: dict[str, Any], variant: dict[str, Any]) -> list[float]:
    """Per job, baseline iteration time / variant iteration time (> 1: the variant trains faster),
    over the jobs that are aggregated and finished an iteration in both runs. The two points
    must hold the same jobs in the same order (same seed and load)."""
    base, other = baseline["job_iteration_s"], variant["job_iteration_s"]
    if len(base) != len(other) or baseline["job_aggregated"] != variant["job_aggregated"]:
        raise ValueError("the two runs do not hold the same jobs")
    return [
        b / v
        for b, v, aggregated in zip(base, other, baseline["job_aggregated"])
        if aggregated and b is not None and v is not None and v > 0
    ]


def compare(baseline: dict[str, Any], variant: dict[str, Any]) -> dict[str, Any]:
    """The paper's three advantages of `variant` over `baseline` at one seed (> 1: better)."""
    ratios = training_time_ratios(baseline, variant)
    fct = variant["p99_short_fct_s"]
    long = baseline["long_throughput_bps"]
    return {
        "p99_short_fct": baseline["p99_short_fct_s"] / fct if fct else None,
        "long_throughput": variant["long_throughput_bps"] / long if long else None,
        "training_time": spread(ratios) if ratios else None,
    }


def over_seeds(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Summarises `compare` results of several seeds: each metric's geometric mean and spread
    over the seeds (training time: over the seeds' per-job geometric means)."""
    summary: dict[str, Any] = {}
    for key in ("p99_short_fct", "long_throughput", "training_time"):
        values = [c[key]["geomean"] if key == "training_time" else c[key] for c in per_seed if c[key] is not None]
        summary[key] = spread(values) if values else None
    summary["jobs_compared"] = sum(int(c["training_time"]["n"]) for c in per_seed if c["training_time"])
    return summary
