"""The staged pipeline: collectives on device tensors as shoal calls on
host staging, with the copies overlapping the calls.

A call becomes a ``Job`` of ``Step``s (a chunked all-reduce: one step per
chunk); a step names the staging it needs, the copies into it, one shoal
call on it, and the copies out of it. Two threads per process run the jobs
in submission order:

- the **issuer** makes the copy stream wait for the caller's stream (as it
  was when the call was made), then for each step takes staging from the
  device's pool, starts the device-to-host copy, and, keeping up to
  ``LOOKAHEAD`` copies ahead, waits for the oldest copy and issues its
  shoal call (``async_op=True``). shoal runs a process's calls in issue
  order, and every rank issues the same steps in the same order;
- the **returner** waits for the shoal calls in issue order, starts each
  step's host-to-device copy as soon as its call is done, gives its staging
  back, and completes the job's future after the last step (with the copy
  stream current, so torch records the event its consumers wait on).

Neither ever blocks the thread that made the call. Calls that do not go
through the pipeline (CPU tensors) must not overtake a submitted job's shoal
calls: they wait in ``wait_until_issued`` until every job submitted before
them has issued all of its calls.
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Callable

from torch import Tensor
from torch.futures import Future

from ._copies import Copies
from ._staging import Lease, bytes_for
from ._work import _completer

LOOKAHEAD = 4  # device-to-host copies started ahead of the oldest step not yet issued


def chunk_bounds(numel: int, itemsize: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """``[start, stop)`` element ranges of at most ``chunk_bytes`` (at least one element) covering ``numel``."""
    per_chunk = max(1, chunk_bytes // itemsize)
    return [(start, min(start + per_chunk, numel)) for start in range(0, numel, per_chunk)]


@dataclass
class Step:
    """One shoal call on staging.

    ``staged``: the host buffers it uses, as (dtype, numel); ``copy_in``:
    (device tensor, index of the buffer it is copied into) before the call;
    ``issue``: starts the shoal call on the buffers and returns its work;
    ``copy_out``: (index of a buffer, device tensor it is copied into) after it."""

    staged: list[tuple[Any, int]]
    copy_in: list[tuple[Tensor, int]]
    issue: Callable[[list[Tensor]], Any]
    copy_out: list[tuple[int, Tensor]]


@dataclass
class Job:
    """The steps of one torch call on one device, and its future (completed with ``result``).

    ``steps`` may be a generator: the issuer makes them (chunk views and all)
    off the caller's thread. ``tensors``: the device tensors the copies use."""

    copies: Copies
    steps: Iterable[Step]
    future: Future
    result: Any
    tensors: list[Tensor]
    after: Any = None  # the caller's stream when the call was made
    error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error  # the first failure is the one to report


@dataclass
class _Staged:
    """A step whose staging is taken and whose copies in have started."""

    step: Step
    lease: Lease
    buffers: list[Tensor]
    copied: Any  # marker of its copies in (or of the staging's last reader)


@dataclass
class _Issued:
    job: Job
    staged: _Staged
    work: Any


@dataclass
class _JobEnd:
    job: Job


@dataclass
class _Pipeline:
    jobs: queue.SimpleQueue[Job] = field(default_factory=queue.SimpleQueue)
    issued: queue.SimpleQueue[_Issued | _JobEnd] = field(default_factory=queue.SimpleQueue)
    unissued: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)
    started: bool = False

    def submit(self, job: Job) -> None:
        """Queues ``job`` (called on the caller's thread; returns at once)."""
        job.after = job.copies.caller_point()
        for t in job.tensors:
            job.copies.hold(t)
        _completer.expect()
        with self.cond:
            self.unissued += 1
            if not self.started:
                self.started = True
                threading.Thread(target=self._issue_loop, name="shoal-torch-issuer", daemon=True).start()
                threading.Thread(target=self._return_loop, name="shoal-torch-returner", daemon=True).start()
        self.jobs.put(job)

    def wait_until_issued(self) -> None:
        """Returns once every submitted job has issued its shoal calls."""
        if self.unissued:  # read without the lock: the common case (no job) costs nothing
            with self.cond:
                self.cond.wait_for(lambda: self.unissued == 0)

    # -- the issuer ----------------------------------------------------------

    def _issue_loop(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                self._issue(job)
            except BaseException as e:  # noqa: BLE001 - every failure belongs to the job
                job.fail(e)
            finally:
                self.issued.put(_JobEnd(job))
                with self.cond:
                    self.unissued -= 1
                    self.cond.notify_all()

    def _issue(self, job: Job) -> None:
        copies = job.copies
        copies.wait_for(job.after)
        pending: collections.deque[_Staged] = collections.deque()
        try:
            for step in job.steps:
                if job.error is not None:
                    break  # a chunk failed: issue no more
                lease = self._lease(job, step, pending)
                try:
                    buffers = lease.regions(step.staged)
                    copied = lease.pending
                    for src, i in step.copy_in:
                        copied = copies.to_host(src, buffers[i])
                except BaseException:
                    lease.release()
                    raise
                pending.append(_Staged(step, lease, buffers, copied))
                while len(pending) > LOOKAHEAD:
                    self._start(job, pending.popleft())
            while pending:
                self._start(job, pending.popleft())
        finally:
            for staged in pending:  # not issued: the job failed
                staged.lease.release()

    def _lease(self, job: Job, step: Step, pending: collections.deque[_Staged]) -> Lease:
        """Staging for ``step``; while the pool has no room, issues the steps
        already copied (their staging comes back once their calls are done)."""
        nbytes = bytes_for(step.staged)
        pool = job.copies.pool
        while True:
            lease = pool.acquire(nbytes, block=not pending)
            if lease is not None:
                return lease
            self._start(job, pending.popleft())

    def _start(self, job: Job, staged: _Staged) -> None:
        """Waits for the step's copies in and issues its shoal call."""
        if job.error is None:
            try:
                if staged.copied is not None:
                    job.copies.synchronize(staged.copied)
                work = staged.step.issue(staged.buffers)
            except BaseException as e:  # noqa: BLE001 - every failure belongs to the job
                job.fail(e)
            else:
                self.issued.put(_Issued(job, staged, work))
                return
        staged.lease.release()

    # -- the returner --------------------------------------------------------

    def _return_loop(self) -> None:
        while True:
            item = self.issued.get()
            if isinstance(item, _JobEnd):
                self._finish(item.job)
            else:
                self._copy_back(item)

    def _copy_back(self, item: _Issued) -> None:
        job, staged = item.job, item.staged
        last_reader = None
        try:
            item.work.wait()  # raises the collective's error
            if job.error is None:
                for i, dst in staged.step.copy_out:
                    last_reader = job.copies.to_device(staged.buffers[i], dst)
        except BaseException as e:  # noqa: BLE001 - every failure belongs to the job
            job.fail(e)
        finally:
            staged.lease.release(last_reader)

    def _finish(self, job: Job) -> None:
        if job.error is not None:
            _completer.hand_over(job.future.set_exception, job.error)
        else:
            _completer.hand_over(lambda value: _complete(job, value), job.result)


def _complete(job: Job, value: Any) -> None:
    try:
        job.copies.complete(job.future, value)
    except BaseException as e:  # noqa: BLE001 - a copy failed late (an asynchronous CUDA error)
        if not job.future.done():
            job.future.set_exception(e)


_pipeline = _Pipeline()


def submit(job: Job) -> None:
    """Runs ``job`` through the process's pipeline."""
    _pipeline.submit(job)


def wait_until_issued() -> None:
    """Blocks until every job submitted so far has issued its shoal calls
    (before a call outside the pipeline issues its own, so that every rank
    issues shoal calls in the same order)."""
    _pipeline.wait_until_issued()
