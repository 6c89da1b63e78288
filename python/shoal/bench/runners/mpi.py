"""OpenMPI's job: ``mpirun --allow-run-as-root --oversubscribe -n N python -m
shoal.bench.worker_mpi`` (mpi4py over the system OpenMPI, default settings).
On the testbed mpirun runs on host 0 and starts its daemons on the other
emulated hosts through :mod:`shoal.testbed.mpi_agent`."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
from typing import Any

from shoal.bench.runners import DEPS_HINT, Runner, python
from shoal.bench.worker import Spec


class MpiRunner(Runner):
    library = "mpi"

    def __init__(self, mpi_args: str = "", testbed: Any = None, **_: object) -> None:
        self.mpi_args = shlex.split(mpi_args)
        self.testbed = testbed

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
        worker = [python(), "-m", "shoal.bench.worker_mpi", "--spec", spec.to_json()]
        if self.testbed is not None:
            return self.testbed.mpirun_argv(self.mpi_args, worker), {}
        argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(nprocs), *self.mpi_args]
        return argv + worker, {}
