"""Gloo's job: N python processes with torchrun's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), started through ``shoal run`` (which
sets exactly those and stops the job when a rank fails; torch never sees
shoal), each running ``python -m shoal.bench.worker_gloo``."""

from __future__ import annotations

import importlib.util

from shoal.bench.runners import DEPS_HINT, Runner, python
from shoal.bench.worker import Spec


class GlooRunner(Runner):
    library = "gloo"

    def __init__(self, **_: object) -> None:
        pass

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
        argv = [python(), "-m", "shoal.cli", "run", "-n", str(nprocs), "--no-prefix", "--"]
        argv += [python(), "-m", "shoal.bench.worker_gloo", "--spec", spec.to_json()]
        return argv, {"GLOO_SOCKET_IFNAME": "lo"}
