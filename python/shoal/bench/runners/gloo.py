"""Gloo's job: N python processes with torchrun's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), started through ``shoal run`` (which
sets exactly those and stops the job when a rank fails; torch never sees
shoal), or ``shoal testbed run`` on the emulated hosts, each running
``python -m shoal.bench.worker_gloo``."""

from __future__ import annotations

import importlib.util
from typing import Any

from shoal.bench.runners import DEPS_HINT, Runner, python, shoal_run_argv
from shoal.bench.worker import Spec


class GlooRunner(Runner):
    library = "gloo"

    def __init__(self, testbed: Any = None, **_: object) -> None:
        self.testbed = testbed

    def missing(self) -> str | None:
        if importlib.util.find_spec("torch") is None:
            return (
                "gloo needs PyTorch (torch.distributed's Gloo backend), which is not installed in this Python.\n"
                f"  install it with: {DEPS_HINT}\n"
                "  or just torch:   pip install torch --index-url https://download.pytorch.org/whl/cpu"
            )
        # (a torch built without Gloo fails in the job, with torch's own message in the log;
        # probing here would cost a torch import, seconds)
        return None

    def command(self, spec: Spec, nprocs: int) -> tuple[list[str], dict[str, str]]:
        worker = [python(), "-m", "shoal.bench.worker_gloo", "--spec", spec.to_json()]
        # Gloo's one interface: loopback on one machine, the host's link on the testbed
        ifname = "lo" if self.testbed is None else self.testbed.interface
        return shoal_run_argv(nprocs, worker, self.testbed), {"GLOO_SOCKET_IFNAME": ifname}
