"""The works the backend returns, and how they complete.

Asynchronous calls (``async_op=True``, DDP's gradient buckets, FSDP's
prefetches) run on shoal's worker thread while Python continues; a small
completion thread per process waits for shoal's work in issue order, copies
staged results back and hands the torch futures to helper threads that
complete them. See docs/torch.md.
"""

from __future__ import annotations

import atexit
import collections
import queue
import threading
import time
from datetime import timedelta
from typing import Any, Callable

import torch.distributed as dist
from torch.futures import Future

from . import _compat

# ---------------------------------------------------------------------------
# Completion: torch futures completed when shoal's work is done


class _Completer:
    """One daemon thread per process: waits for shoal works in issue order and
    runs each call's finishing step (copies back staged results); then hands
    the torch future to ``_helpers`` to complete. Counts the calls not yet
    completed, so that shutdown and interpreter exit can wait for them."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[list[Any], Callable[[], None] | None, Future, Any]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._outstanding = 0

    def submit(self, works: list[Any], finish: Callable[[], None] | None, future: Future, result: Any) -> None:
        with self._idle:
            self._outstanding += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="shoal-torch-completer", daemon=True)
                self._thread.start()
        self._queue.put((works, finish, future, result))

    def expect(self) -> None:
        """Counts a call that another thread completes through ``hand_over`` (the CUDA pipeline's)."""
        with self._idle:
            self._outstanding += 1

    def hand_over(self, complete: Callable[[Any], None], value: Any) -> None:
        """Completes an expected call: ``complete(value)`` on a helper thread."""
        _helpers.run(lambda: self._completed(complete, value))

    def drain(self, timeout: float | None = None) -> bool:
        """Waits until every submitted call has completed (False if ``timeout`` passed first)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    def _loop(self) -> None:
        while True:
            works, finish, future, result = self._queue.get()
            try:
                _wait_and_finish(works, finish)
            except BaseException as e:  # noqa: BLE001 - every failure belongs to the future
                _helpers.run(lambda future=future, e=e: self._completed(future.set_exception, e))  # type: ignore[misc]
            else:
                _helpers.run(lambda future=future, result=result: self._completed(future.set_result, result))  # type: ignore[misc]

    def _completed(self, complete: Callable[[Any], None], value: Any) -> None:
        try:
            complete(value)
        finally:
            with self._idle:
                self._outstanding -= 1
                self._idle.notify_all()


class _Helpers:
    """Threads that complete torch futures. Completing a future runs its
    callbacks (DDP's, comm hooks') on the completing thread, and a callback
    may wait for a later collective (PowerSGD does): so the completion thread
    never runs them itself, and a new helper starts whenever every helper is
    busy, so a waiting callback never holds up the completion it waits for."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1  # an idle helper is reserved for this task
            else:
                threading.Thread(target=self._loop, name="shoal-torch-helper", daemon=True).start()
        self._queue.put(task)

    def _loop(self) -> None:
        while True:
            self._queue.get()()
            with self._lock:
                self._idle += 1


_helpers = _Helpers()


def _wait_and_finish(works: list[Any], finish: Callable[[], None] | None) -> None:
    for w in works:
        w.wait()
    if finish is not None:
        finish()


def _complete(future: Future, result: Any, run: Callable[[], None]) -> None:
    """Runs ``run`` and completes ``future`` with ``result`` or with the error raised."""
    try:
        run()
    except BaseException as e:  # noqa: BLE001 - every failure belongs to the future
        future.set_exception(e)
        return
    future.set_result(result)


_completer = _Completer()


@atexit.register
def _quiesce_at_exit() -> None:
    # A helper thread still inside torch's Future.set_result when the interpreter
    # finalises is torn down in the middle of C++ frames, which aborts the process
    # ("terminate called without an active exception"): let outstanding calls finish.
    _completer.drain(timeout=10.0)


class _Keeper:
    """Keeps ShoalWorks alive on torch releases that drop the Python object of
    a work returned to C++ code (see ``_compat``): without it, a C++ ``wait()``
    on the work (DDP's constructor, ``_broadcast_coalesced``, the functional
    collectives' ``wait_tensor``) waits forever instead of running
    ``ShoalWork.wait``, so neither the collective's error nor SHOAL_TIMEOUT
    could end it.

    A work is held from its creation until torch consumes it: ``wait()``
    returns (or raises), or its future is taken. A work that is never
    consumed (an ``isend`` nobody waits for) is let go once it is complete
    and ``ABANDONED_AFTER`` seconds old, so that its tensors are not kept
    forever; C++ code that waits that late for a work it left alone is not
    known in torch."""

    ABANDONED_AFTER = 300.0

    def __init__(self, needed: bool) -> None:
        self.needed = needed
        self._lock = threading.Lock()
        self._held: collections.OrderedDict[int, tuple[ShoalWork, float]] = collections.OrderedDict()

    def hold(self, work: ShoalWork) -> None:
        if not self.needed:
            return
        now = time.monotonic()
        with self._lock:
            self._let_go_of_abandoned(now)
            self._held[id(work)] = (work, now)

    def release(self, work: ShoalWork) -> None:
        if not self.needed:
            return
        with self._lock:
            self._held.pop(id(work), None)

    def held(self) -> int:
        """How many works are held now."""
        with self._lock:
            return len(self._held)

    def _let_go_of_abandoned(self, now: float) -> None:
        # the held works are in creation order: only the old ones at the front are looked at
        abandoned = []
        for key, (work, since) in self._held.items():
            if now - since < self.ABANDONED_AFTER:
                break
            if work.is_completed():
                abandoned.append(key)
        for key in abandoned:
            del self._held[key]


_keeper = _Keeper(needed=not _compat.PYTHON_WORKS_OUTLIVE_CALL)


class ShoalWork(dist.Work):
    """The torch work of one shoal call: waits on its future.

    ``direct``: shoal works that leave the results in place (nothing to copy
    back); ``wait()`` then waits for them itself rather than for the future,
    which the completion thread completes a little later."""

    def __init__(
        self,
        future: Future,
        before_wait: Callable[[], None] | None = None,
        direct: list[Any] | None = None,
        source: Callable[[], int] | None = None,
    ) -> None:
        super().__init__()
        self._future = future
        self._source = source
        self._before_wait = before_wait
        self._direct = direct
        _keeper.hold(self)

    def wait(self, timeout: timedelta | None = None) -> bool:
        try:
            if self._before_wait is not None:
                self._before_wait()
            if self._direct is not None and not self._future.done():
                for w in self._direct:
                    w.wait()  # raises the collective's error
                return True
            self._future.wait()  # raises the collective's error
            return True
        finally:
            _keeper.release(self)

    def is_completed(self) -> bool:
        if self._direct is not None and all(w.is_completed() for w in self._direct):
            return True
        done: bool = self._future.done()
        return done

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001
            return False
        return True

    def exception(self) -> BaseException | None:
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as e:  # noqa: BLE001
            return e
        return None

    def get_future(self) -> Future:
        # whoever takes the future waits on it from now on (DDP's C++ reducer does, and never calls wait())
        _keeper.release(self)
        return self._future

    def result(self) -> Any:
        return self._future.value()

    def source_rank(self) -> int:
        """The group rank a receive got its message from (every receive; torch
        asks a receive from any source)."""
        if self._source is None:
            raise RuntimeError("source_rank() is known for a completed receive only")
        source: int = self._source()
        return source

    _source_rank = sourceRank = source_rank  # noqa: N815 - the names torch calls

    def synchronize(self) -> None:
        self.wait()


class _Calls:
    """The shoal calls one torch call makes: collects their works when asynchronous."""

    def __init__(self, async_op: bool) -> None:
        self.async_op = async_op
        self.works: list[Any] = []

    def add(self, outcome: Any) -> None:
        if self.async_op:
            self.works.append(outcome)
