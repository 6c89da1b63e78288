"""PANAMA's comparisons between variants (shoal.sim.paper_metrics) on hand-computed cases."""

from __future__ import annotations

import math
from typing import Any

import pytest

from shoal.sim.paper_metrics import compare, geomean, over_seeds, training_time_ratios


def point(iterations: list[float | None], aggregated: list[bool], fct: float, tput: float) -> dict[str, Any]:
    return {
        "job_iteration_s": iterations,
        "job_aggregated": aggregated,
        "p99_short_fct_s": fct,
        "long_throughput_bps": tput,
    }


def test_training_time_is_per_aggregated_job_and_geometric() -> None:
    aggregated = [True, False, True, True, True]
    # job 0: 0.6 / 0.4 = 1.5; job 1 not aggregated (GoogLeNet); job 2: 0.5 / 1.0 = 0.5;
    # job 3 finished nothing under ring; job 4: 0.9 / 0.45 = 2.0.
    ring = point([0.6, 0.2, 0.5, None, 0.9], aggregated, 2e-3, 4e9)
    panama = point([0.4, 0.1, 1.0, 0.3, 0.45], aggregated, 1e-3, 5e9)
    assert training_time_ratios(ring, panama) == pytest.approx([1.5, 0.5, 2.0])
    c = compare(ring, panama)
    # (1.5 x 0.5 x 2.0) ** (1/3) = 1.5 ** (1/3) = 1.1447
    assert c["training_time"]["geomean"] == pytest.approx(1.5 ** (1 / 3))
    assert (c["training_time"]["min"], c["training_time"]["max"], c["training_time"]["n"]) == (0.5, 2.0, 3)
    # A mean over all iterations would have said (0.6+0.2+0.5+0.9)/4 / (0.4+0.1+1.0+0.3+0.45)/5: not this.
    assert c["p99_short_fct"] == pytest.approx(2.0)
    assert c["long_throughput"] == pytest.approx(1.25)


def test_over_seeds_takes_the_geometric_mean_and_spread() -> None:
    per_seed = [
        {"p99_short_fct": 2.0, "long_throughput": 1.1, "training_time": {"geomean": 1.2, "min": 1, "max": 1, "n": 4}},
        {"p99_short_fct": 8.0, "long_throughput": 1.3, "training_time": {"geomean": 1.5, "min": 1, "max": 2, "n": 5}},
        {"p99_short_fct": 4.0, "long_throughput": 1.2, "training_time": None},
    ]
    s = over_seeds(per_seed)
    assert s["p99_short_fct"]["geomean"] == pytest.approx(4.0)  # (2 x 8 x 4) ** (1/3)
    assert (s["p99_short_fct"]["min"], s["p99_short_fct"]["max"]) == (2.0, 8.0)
    assert s["training_time"]["geomean"] == pytest.approx(math.sqrt(1.2 * 1.5))
    assert s["jobs_compared"] == 9


def test_runs_with_different_jobs_are_refused() -> None:
    with pytest.raises(ValueError, match="same jobs"):
        training_time_ratios(point([1.0], [True], 1, 1), point([1.0, 2.0], [True, True], 1, 1))
    with pytest.raises(ValueError):
        geomean([])
