"""torch's own test class for its distributed backends
(``torch.testing._internal.distributed.distributed_test.DistributedTest._DistTestBase``),
run as torch's ``test/distributed/test_distributed_spawn.py`` runs it for
Gloo, on CPU, with every process group that the tests create for Gloo
created by the shoal backend instead (``--as shoal``, the default) or left to
Gloo (``--as gloo``, the reference).

The tests decide what to run and what to skip from ``BACKEND``, and most of
them run only for ``"gloo"`` (or a list of torch's own backends), so the
suite runs with ``BACKEND=gloo``, and the shim below makes torch's single
place that creates process groups (``_new_process_group_helper``) create a
shoal group wherever it was asked for a Gloo one. Everything the tests call
then runs on shoal; only ``dist.get_backend()`` answers ``"shoal"`` (so
``test_get_backend``, which checks the name, fails by design).

Usage: ``python torch_dist_suite.py [--as shoal|gloo] [--start fork|spawn]
[--world N] [--list] [TEST_NAME ...]``; prints one ``RESULT <test> <outcome>``
line per test (outcome: pass, fail, error, skip) and then ``SUMMARY ...``.
Launched by tests/test_torch_dist_suite.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import unittest
from typing import Any


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--as", dest="backend", choices=["shoal", "gloo"], default=os.environ.get("SUITE_AS", "shoal"))
    p.add_argument("--start", choices=["fork", "spawn"], default=os.environ.get("SUITE_START", "spawn"))
    p.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", "3")))
    p.add_argument("--list", action="store_true", help="print the test names and exit")
    p.add_argument("tests", nargs="*")
    return p.parse_args()


# The environment torch's test module reads at import (and its spawned ranks
# inherit): set before it is imported, here and in every spawned rank, which
# imports this file again as __mp_main__.
os.environ["BACKEND"] = "gloo"
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("SUITE_AS", "shoal")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="shoal-dist-suite-")
# as torch's CI runs the suite with a file:// INIT_METHOD (test_barrier_timeout_global needs one)
os.environ.setdefault("INIT_METHOD", f"file://{os.path.join(os.environ['TEMP_DIR'], 'init_method_file')}")
if __name__ == "__main__":
    _ARGS = _args()
    os.environ["WORLD_SIZE"] = str(_ARGS.world)
    os.environ["SUITE_AS"] = _ARGS.backend
    os.environ["SUITE_START"] = _ARGS.start

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


def _shoal_for_gloo() -> None:
    """Makes every process group created for Gloo a shoal one."""
    import shoal.torch

    helper = c10d._new_process_group_helper
    if getattr(helper, "_shoal_shim", False):
        return
    backend_at = 3  # (group_size, group_rank, global_ranks_in_group, backend, ...) on 2.4 to 2.15

    def create(*args: Any, **kwargs: Any) -> Any:
        args_l = list(args)
        if "backend" in kwargs:
            if str(kwargs["backend"]).lower() == "gloo":
                kwargs["backend"] = dist.Backend(shoal.torch.BACKEND)
        elif len(args_l) > backend_at and str(args_l[backend_at]).lower() == "gloo":
            args_l[backend_at] = dist.Backend(shoal.torch.BACKEND)
        return helper(*args_l, **kwargs)

    create._shoal_shim = True  # type: ignore[attr-defined]
    c10d._new_process_group_helper = create


if os.environ["SUITE_AS"] == "shoal":
    _shoal_for_gloo()


class TestDistBackendShoal(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self) -> None:
        super().setUp()
        if os.environ.get("SUITE_START") == "fork":
            # torch's _fork_processes (gone in newer releases)
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


class _Results(unittest.TextTestResult):
    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.outcomes: dict[str, str] = {}
        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = {}

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        self.started[test.id()] = time.monotonic()
        super().startTest(test)

    def _set(self, test: unittest.TestCase, outcome: str) -> None:
        name = test.id().split(".")[-1]
        self.outcomes[name] = outcome
        took = time.monotonic() - self.started.get(test.id(), time.monotonic())
        print(f"RESULT {name} {outcome} {took:.1f}s", file=sys.stderr, flush=True)

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addSuccess(test)
        self._set(test, "pass")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addFailure(test, err)
        self._set(test, "fail")

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addError(test, err)
        self._set(test, "error")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        super().addSkip(test, reason)
        self._set(test, "skip")

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addExpectedFailure(test, err)
        self._set(test, "pass")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._set(test, "fail")


def main() -> int:
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestDistBackendShoal)
    if _ARGS.list:
        print("\n".join(names))
        return 0
    wanted = _ARGS.tests or names
    unknown = sorted(set(wanted) - set(names))
    suite = unittest.TestSuite(TestDistBackendShoal(n) for n in wanted if n in names)
    start = time.monotonic()
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=1, resultclass=_Results)
    result: Any = runner.run(suite)
    counts: dict[str, int] = {}
    for outcome in result.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    for name in unknown:
        print(f"RESULT {name} absent 0.0s", file=sys.stderr, flush=True)
    summary = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    print(
        f"SUMMARY as={_ARGS.backend} start={_ARGS.start} {summary} absent={len(unknown)} "
        f"seconds={time.monotonic() - start:.0f}",
        flush=True,
    )
    for name, outcome in sorted(result.outcomes.items()):
        print(f"RESULT {name} {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
