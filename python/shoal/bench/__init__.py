"""``shoal bench``: side-by-side collective benchmarks of shoal, Gloo and OpenMPI.

Layout:

- :mod:`shoal.bench.cli` -- the command line (``shoal bench COLLECTIVE ...``).
- :mod:`shoal.bench.sizes` -- size ranges such as ``8:64M``.
- :mod:`shoal.bench.worker` -- the timing loop every library's worker runs,
  identical for all of them; ``worker_shoal``, ``worker_gloo`` and
  ``worker_mpi`` only adapt one library's calls to it.
- :mod:`shoal.bench.check` -- input patterns and reference results.
- :mod:`shoal.bench.runners` -- one module per library, each starting its own
  N-rank job and collecting the workers' results.
- :mod:`shoal.bench.roofline` -- the memory-bandwidth reference.
- :mod:`shoal.bench.report` -- tables, ratios, JSON and plots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from shoal._types import CollectiveName

COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall")
#: in-network allreduce (needs SHOAL_SWITCH): an algorithm of its own, not a plan in shoal.algorithms()
INA = "ina"


def shoal_algorithms(collective: str, switch: bool = True) -> list[str]:
    """shoal's algorithms for `collective`: the plans, and 'ina' for allreduce when a switch is there."""
    import shoal

    return [
        *shoal.algorithms(cast("CollectiveName", collective)),
        *([INA] if collective == "allreduce" and switch else []),
    ]
