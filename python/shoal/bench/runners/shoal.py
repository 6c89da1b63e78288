"""shoal's job: ``shoal run -n N -- python -m shoal.bench.worker_shoal``."""

from __future__ import annotations

from shoal.bench.runners import Runner, python
from shoal.bench.worker import Spec


class ShoalRunner(Runner):
    library = "shoal"

    def __init__(self, transport: str | None = None, **_: object) -> None:
        self.transport = transport

    def command(self, spec: Spec, nprocs: int) -> tuple[list[str], dict[str, str]]:
        argv = [python(), "-m", "shoal.cli", "run", "-n", str(nprocs), "--no-prefix", "--"]
        argv += [python(), "-m", "shoal.bench.worker_shoal", "--spec", spec.to_json()]
        env = {"SHOAL_TRANSPORT": self.transport} if self.transport else {}
        return argv, env
