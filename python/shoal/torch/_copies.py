"""Copy engines: how the pipeline (``_pipeline``) moves data between a
device's tensors and host staging, and how it marks and waits for points
in that stream of copies.

``CudaCopies`` is the real one: a copy stream per device, CUDA events as
markers, pinned staging. ``HostCopies`` does the same for CPU tensors with
an in-order copy thread standing in for the stream, so that everything the
pipeline does except these few calls runs, and is tested, without a GPU.

Both keep the two rules the pipeline relies on: copies run in the order
they were issued, and a marker is reached once every copy issued before it
is done.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Protocol

import torch
from torch import Tensor
from torch.futures import Future

from ._staging import StagingPool, capacity_from_env, pageable, pinned


class Copies(Protocol):
    """A device's copy stream, its markers and its staging pool."""

    device: torch.device
    pool: StagingPool

    def caller_point(self) -> Any:
        """A marker of the work issued so far on the caller's current stream (called on the caller's thread)."""

    def wait_for(self, marker: Any) -> None:
        """Copies issued from now on start after ``marker`` (the stream waits, the CPU does not)."""

    def to_host(self, src: Tensor, dst: Tensor) -> Any:
        """Starts copying device ``src`` into staging ``dst``; returns a marker of its end."""

    def to_device(self, src: Tensor, dst: Tensor) -> Any:
        """Starts copying staging ``src`` into device ``dst``; returns a marker of its end."""

    def synchronize(self, marker: Any) -> None:
        """Blocks the calling thread until ``marker`` is reached."""

    def hold(self, tensor: Tensor) -> None:
        """Keeps ``tensor``'s memory from being reused while copies issued later still use it."""

    def new_future(self) -> Future:
        """The future of a call on this device's tensors."""

    def complete(self, future: Future, value: Any) -> None:
        """Completes ``future`` after the copies issued so far (consumers wait for them)."""


class CudaCopies:
    """A CUDA device: one copy stream, events as markers, pinned staging.

    Completion follows torch's rules for CUDA futures: the future is made
    with ``devices=[device]`` and completed while the copy stream is the
    current stream, so torch records an event there, and whoever waits on
    the future (``wait()``, ``then()``, DDP's reducer) makes its own current
    stream wait for that event instead of blocking the CPU."""

    def __init__(self, device: torch.device, pool: StagingPool) -> None:
        self.device = device
        self.pool = pool
        self.stream = torch.cuda.Stream(device)

    def caller_point(self) -> Any:
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def wait_for(self, marker: Any) -> None:
        self.stream.wait_event(marker)

    def to_host(self, src: Tensor, dst: Tensor) -> Any:
        with torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)
        # blocking: the driver thread sleeps in synchronize() instead of spinning on a core shoal needs
        return self._record(blocking=True)

    def to_device(self, src: Tensor, dst: Tensor) -> Any:
        with torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)
        return self._record(blocking=False)

    def _record(self, blocking: bool) -> Any:
        event = torch.cuda.Event(blocking=blocking)
        event.record(self.stream)
        return event

    def synchronize(self, marker: Any) -> None:
        marker.synchronize()

    def hold(self, tensor: Tensor) -> None:
        tensor.record_stream(self.stream)

    def new_future(self) -> Future:
        return Future(devices=[self.device])

    def complete(self, future: Future, value: Any) -> None:
        with torch.cuda.stream(self.stream):
            future.set_result(value)


class _HostMarker:
    """A point in a host copy thread's work; carries the error of a copy before it."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.error: BaseException | None = None


class HostCopies:
    """CPU tensors as if they were on a device: copies run in issue order on
    one thread of their own (``delay`` seconds each, so that tests see a
    reader that does not wait for its copy read stale data)."""

    def __init__(self, pool: StagingPool | None = None, delay: float = 0.0) -> None:
        self.device = torch.device("cpu")
        self.pool = pool or StagingPool(capacity_from_env(), pageable)
        self.delay = delay
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._error: BaseException | None = None  # sticky, as a CUDA stream's
        threading.Thread(target=self._loop, name="shoal-host-copies", daemon=True).start()

    def _loop(self) -> None:
        while True:
            task = self._work.get()
            try:
                task()
            except BaseException as e:  # noqa: BLE001 - reported at the next marker
                self._error = e

    def _marker(self) -> _HostMarker:
        marker = _HostMarker()

        def reach() -> None:
            marker.error = self._error
            marker.reached.set()

        self._work.put(reach)
        return marker

    def caller_point(self) -> Any:
        marker = _HostMarker()  # CPU work is done when the caller calls
        marker.reached.set()
        return marker

    def wait_for(self, marker: Any) -> None:
        self._work.put(marker.reached.wait)

    def to_host(self, src: Tensor, dst: Tensor) -> Any:
        return self._copy(src, dst)

    def to_device(self, src: Tensor, dst: Tensor) -> Any:
        return self._copy(src, dst)

    def _copy(self, src: Tensor, dst: Tensor) -> _HostMarker:
        if src.numel() != dst.numel():  # checked when issued, as torch checks a stream's copy
            raise RuntimeError(f"copy of {src.numel()} elements into {dst.numel()}")

        def copy() -> None:
            if self.delay:
                time.sleep(self.delay)
            dst.copy_(src.view(dst.shape))

        self._work.put(copy)
        return self._marker()

    def synchronize(self, marker: Any) -> None:
        marker.reached.wait()
        if marker.error is not None:
            raise marker.error

    def hold(self, tensor: Tensor) -> None:
        pass  # CPU memory is not reused while a Python reference to it remains

    def new_future(self) -> Future:
        return Future()

    def complete(self, future: Future, value: Any) -> None:
        # a CPU future has no events for consumers to wait on: wait here (on a helper thread)
        self.synchronize(self._marker())
        future.set_result(value)


_engines: dict[torch.device, CudaCopies] = {}
_engines_lock = threading.Lock()


def for_device(device: torch.device) -> CudaCopies:
    """The copy engine of a CUDA device (one per device and process)."""
    with _engines_lock:
        engine = _engines.get(device)
        if engine is None:
            engine = _engines[device] = CudaCopies(device, StagingPool(capacity_from_env(), pinned))
        return engine
