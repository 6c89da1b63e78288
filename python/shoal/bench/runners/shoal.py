"""shoal's job: ``shoal run -n N -- python -m shoal.bench.worker_shoal`` (``shoal testbed run`` on the testbed)."""

from __future__ import annotations

from typing import Any

from shoal.bench.runners import Runner, python, shoal_run_argv
from shoal.bench.worker import Spec


class ShoalRunner(Runner):
    library = "shoal"

    def __init__(self, transport: str | None = None, testbed: Any = None, **_: object) -> None:
        self.transport = transport
        self.testbed = testbed

    def command(self, spec: Spec, nprocs: int) -> tuple[list[str], dict[str, str]]:
        worker = [python(), "-m", "shoal.bench.worker_shoal", "--spec", spec.to_json()]
        argv = shoal_run_argv(nprocs, worker, self.testbed)
        env = {"SHOAL_TRANSPORT": self.transport} if self.transport else {}
        return argv, env
