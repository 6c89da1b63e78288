"""OpenMPI's job: ``mpirun --allow-run-as-root --oversubscribe -n N python -m
shoal.bench.worker_mpi`` (mpi4py over the system OpenMPI, default settings)."""

from __future__ import annotations

import importlib.util
import shlex
import shutil

from shoal.bench.runners import DEPS_HINT, Runner, python
from shoal.bench.worker import Spec


class MpiRunner(Runner):
    library = "mpi"

    def __init__(self, mpi_args: str = "", **_: object) -> None:
        self.mpi_args = shlex.split(mpi_args)

    def missing(self) -> str | None:
        problems = []
        if shutil.which("mpirun") is None:
            problems.append("mpirun (OpenMPI): apt-get install -y openmpi-bin libopenmpi-dev")
        if importlib.util.find_spec("mpi4py") is None:
            problems.append("mpi4py in this Python: pip install mpi4py (needs libopenmpi-dev)")
        if not problems:
            return None
        return "mpi needs " + "; ".join(problems) + f"\n  or install every competitor with: {DEPS_HINT}"

    def command(self, spec: Spec, nprocs: int) -> tuple[list[str], dict[str, str]]:
        argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(nprocs), *self.mpi_args]
        argv += [python(), "-m", "shoal.bench.worker_mpi", "--spec", spec.to_json()]
        return argv, {}
