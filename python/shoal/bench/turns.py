"""One round of ``shoal bench`` with every job alive at once, taking turns repeat by repeat.

A job runs alone, as in a round of whole jobs, but only for one timed repeat
at a time: the bench starts every job of the round, then, for each size and
each repeat, lets each job in turn run that repeat while the others wait,
blocked on a pipe. So the competitors measure each size within milliseconds
of each other, and a change in the machine's speed (another tenant, a
migrated vCPU) that lasts longer than a turn falls on all of them alike,
instead of on whichever job happened to run through it. (On the 2-vCPU dev
VM such a change made every library's 1 MiB allreduce seven times slower
for whole rounds; docs/benchmarks.md.)

Each job gets a FIFO (``Spec.gate``) in a folder only this user can open; each
of its ranks reads one byte from it before each repeat (``worker.Gate``). The
order of the jobs alternates from one turn to the next.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from shoal.bench.runners import JobResult, Runner
from shoal.bench.worker import Gate, Spec

#: what a job's reader thread queues when the job has ended
_ENDED = {"type": "ended"}


class TurnJob:
    """One job of the round: its runner's job in a thread, its gate, its records as they come."""

    def __init__(self, name: str, runner: Runner, spec: Spec, nprocs: int, gate: Path) -> None:
        self.name = name
        self.nprocs = nprocs
        os.mkfifo(gate, 0o600)
        # read-write: the ranks' opens never block, and they see no end of
        # the pipe until this bench closes it
        self.fd: int | None = os.open(gate, os.O_RDWR)
        self.spec = replace(spec, gate=str(gate))
        self.runner = runner
        self.records: queue.Queue[dict[str, Any]] = queue.Queue()
        self.result: JobResult | None = None
        self.ended = False

    def start(self, log: Path, on_record: Callable[[dict[str, Any]], None], timeout: float | None) -> None:
        def body() -> None:
            def seen(rec: dict[str, Any]) -> None:
                on_record(rec)
                self.records.put(rec)

            try:
                self.result = self.runner.run(self.spec, self.nprocs, log, seen, timeout)
            finally:
                self.records.put(_ENDED)

        self.thread = threading.Thread(target=body, name=f"bench {self.name}", daemon=True)
        self.thread.start()

    def wait_started(self) -> None:
        """Returns once the job's ranks are up (rank 0 reported its start) or it
        has ended: no job's turn overlaps another's start-up."""
        while not self.ended:
            rec = self.records.get()
            if rec is _ENDED:
                self.ended = True
            elif rec.get("type") == "start":
                return

    def take_turn(self) -> None:
        """Lets the job run its next repeat; returns when rank 0 has reported
        its end (or the job has ended: failed, or out of sizes it supports)."""
        if self.ended or self.fd is None:
            return
        try:
            os.write(self.fd, Gate.GO * self.nprocs)
        except OSError:
            self.ended = True
            return
        while True:
            rec = self.records.get()
            if rec is _ENDED:
                self.ended = True
                return
            if rec.get("type") == "unsupported":
                self.ended = True  # (its worker stops after this size)
                return
            if rec.get("type") in ("turn", "result"):
                return

    def close(self) -> JobResult:
        """Ends the job's turns (ranks still waiting for one see the pipe's
        end and exit) and waits for it."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        self.thread.join()
        assert self.result is not None
        return self.result


def run_round(
    jobs: list[tuple[str, Runner, Spec]],
    nprocs: int,
    nsizes: int,
    repeats: int,
    logs: Callable[[str], Path],
    on_record: Callable[[str, dict[str, Any]], None],
    timeout: float,
    first_reversed: bool = False,
) -> dict[str, JobResult]:
    """Runs ``jobs`` (name, runner, spec) together, taking turns repeat by
    repeat (``repeats`` per size); each job's result by name. A job may take
    ``timeout`` seconds of its own turns; it lives through everyone's, so the
    bench waits for it at most ``timeout`` times the number of jobs."""
    with tempfile.TemporaryDirectory(prefix="shoal-bench-turns-") as folder:
        turns: list[TurnJob] = []
        try:
            for i, (name, runner, spec) in enumerate(jobs):
                t = TurnJob(name, runner, spec, nprocs, Path(folder) / f"gate{i}")
                t.start(logs(name), functools.partial(on_record, name), timeout * len(jobs))
                turns.append(t)
            for t in turns:
                t.wait_started()
            for turn in range(nsizes * repeats):
                order = turns if (turn % 2 == 1) == first_reversed else list(reversed(turns))
                for t in order:
                    t.take_turn()
        finally:
            results = {t.name: t.close() for t in turns}
    return results
