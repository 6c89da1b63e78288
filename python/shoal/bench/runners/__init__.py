"""One runner per library. Each starts its own N-rank job running that
library's worker (``shoal.bench.worker_<library>``), streams the JSON lines
rank 0 prints, and keeps everything else the ranks print in a log file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.bench.worker import MARKER, Spec

#: the command that installs every competitor (documented in README "Benchmarks")
DEPS_HINT = "bash scripts/bench-deps.sh"


@dataclass
class JobResult:
    """What one library's job produced."""

    records: list[dict[str, Any]] = field(default_factory=list)
    returncode: int = 0
    seconds: float = 0.0
    log: str = ""  # path of the ranks' log
    log_tail: str = ""

    @property
    def start(self) -> dict[str, Any]:
        return next((r for r in self.records if r.get("type") == "start"), {})

    @property
    def results(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == "result"]

    @property
    def unsupported(self) -> str | None:
        return next((r["reason"] for r in self.records if r.get("type") == "unsupported"), None)


class Runner:
    """How to start one library's N-rank job."""

    library = "?"

    def missing(self) -> str | None:
        """None if the library can run here, else what is missing and the command that provides it."""
        return None

    def command(self, spec: Spec, nprocs: int) -> tuple[list[str], dict[str, str]]:
        """argv and extra environment of the job."""
        raise NotImplementedError

    def run(
        self,
        spec: Spec,
        nprocs: int,
        log_path: Path,
        on_record: Callable[[dict[str, Any]], None],
        timeout: float | None = None,
    ) -> JobResult:
        argv, extra_env = self.command(spec, nprocs)
        env = {**os.environ, **base_env(), **extra_env}
        return run_job(argv, env, log_path, on_record, timeout)


def base_env() -> dict[str, str]:
    """Environment every library's ranks get alike."""
    return {
        "PYTHONUNBUFFERED": "1",
        # ranks share the cores: no library gets helper thread pools for its reductions
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }


def python() -> str:
    return sys.executable


def shoal_run_argv(nprocs: int, command: list[str], testbed: Any = None) -> list[str]:
    """`command` on N ranks with torchrun's environment: ``shoal run``, or ``shoal testbed run`` when
    `testbed` (a :class:`shoal.testbed.bench.Placement`) places the ranks on the emulated hosts."""
    if testbed is not None:
        argv: list[str] = testbed.run_argv(command)
        return argv
    return [python(), "-m", "shoal.cli", "run", "-n", str(nprocs), "--no-prefix", "--", *command]


def run_job(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    on_record: Callable[[dict[str, Any]], None],
    timeout: float | None,
) -> JobResult:
    """Runs a job; marker lines of stdout become records, everything else goes to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result = JobResult(log=str(log_path))
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        except OSError as e:
            log.write(f"cannot start: {e}\n")
            result.returncode = 127
            result.log_tail = str(e)
            return result
        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, _stop, args=(proc, log))
            timer.daemon = True
            timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(MARKER):
                    try:
                        record = json.loads(line[len(MARKER) :])
                    except json.JSONDecodeError:
                        log.write(line)
                        continue
                    result.records.append(record)
                    on_record(record)
                else:
                    log.write(line)
            proc.wait()
        except BaseException:
            _stop(proc, log)
            raise
        finally:
            if timer is not None:
                timer.cancel()
    result.returncode = proc.returncode
    result.seconds = time.monotonic() - t0
    with open(log_path) as f:
        result.log_tail = "".join(f.readlines()[-30:])
    return result


def _stop(proc: subprocess.Popen[str], log: Any) -> None:
    """SIGTERM to the job's process group (launchers forward it to their ranks), then SIGKILL."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(Exception):
        log.write("shoal bench: stopping the job (timeout or interrupt)\n")
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)


def get_runner(library: str, **options: Any) -> Runner:
    if library == "shoal":
        from shoal.bench.runners.shoal import ShoalRunner

        return ShoalRunner(**options)
    if library == "gloo":
        from shoal.bench.runners.gloo import GlooRunner

        return GlooRunner(**options)
    if library == "mpi":
        from shoal.bench.runners.mpi import MpiRunner

        return MpiRunner(**options)
    raise ValueError(f"unknown library {library!r} (known: shoal, gloo, mpi)")


LIBRARIES = ("shoal", "gloo", "mpi")
