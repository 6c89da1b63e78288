"""`shoal run`: start N ranks of a command on this machine.

Usage::

    shoal run -n N [--master-port P] [--no-prefix] [--log-dir DIR] [--timeout S] [--bind cores|none]
              [--env K=V ...] [--] cmd args...

A command that is a Python file (``shoal run -n 2 train.py``) or a bare
``python``/``python3`` runs with the interpreter running ``shoal``
(``sys.executable``), as torchrun does: the ranks see the same packages as the
launcher, whatever ``PATH`` says.

Every rank gets the torchrun environment convention (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) plus a
fresh ``SHOAL_JOB_ID``, a fresh ``SHOAL_SECRET`` (unless the user chose a
secret with ``SHOAL_SECRET`` or ``SHOAL_SECRET_FILE``) and
``PYTHONUNBUFFERED=1``; ``--env`` values are applied last, so the user has the
final word. Output lines are prefixed with
``[rank]: `` (stdout and stderr kept apart); with ``--no-prefix`` they still
pass through the launcher whole, so lines of different ranks never mix.
With ``--log-dir DIR`` each rank's output also goes, unprefixed, to
``DIR/rank-N.log`` (stdout and stderr interleaved as they arrive).

While the ranks fit the machine's cores, each rank is bound to its own
share of them (``--bind cores``, the default; ``--bind none`` leaves placement
to the kernel), as ``mpirun`` binds its ranks: the shared-memory transport's
waits poll, and two ranks that the kernel placed on one core take turns at
it (a 512-byte broadcast then takes 2.7-3.7 us instead of 0.45 on the 2-vCPU
VM, docs/benchmarks.md). The cores (a core's hardware threads together) are
split into consecutive equal shares, so a rank's own threads and the
processes it starts (data loaders) keep the rest of its share. Since a bound
rank sees only its share, the ranks are told the machine's count in
``SHOAL_HOST_CPUS``. More ranks than cores are not bound.

Failure handling follows the rule "one rank fails, the job fails": when a rank
exits non-zero the others get SIGTERM, then SIGKILL after a grace period, and
the launcher exits with the failing rank's code (a death by signal N becomes
128+N, as in shells). SIGINT/SIGTERM sent to the launcher are forwarded to the
ranks. ``--timeout`` stops everything after S seconds with exit code 124.

The supervision (:class:`RankSpec`, :func:`launch`) is shared with
``shoal testbed run``, which starts its ranks inside network namespaces.

This module deliberately imports only the standard library: it must work
before (and without) the compiled extension.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO, TextIO

#: Seconds between SIGTERM and SIGKILL when stopping ranks.
GRACE_SECONDS = 3.0
#: Exit code on --timeout (the convention of coreutils' `timeout`).
EXIT_TIMEOUT = 124
#: Exit code of a bad command line (argparse's).
EXIT_USAGE = 2
#: Exit code when the command cannot be started (the shell's "command not found").
EXIT_CANNOT_START = 127
#: How often the supervisor checks on the ranks.
POLL_SECONDS = 0.05
#: Commands that mean "the Python interpreter" and run as the launcher's own.
PYTHON_NAMES = ("python", "python3")


@dataclass
class Options:
    """The parsed command line of `shoal run`."""

    nprocs: int
    master_port: int
    prefix: bool
    timeout: float | None
    env: dict[str, str]
    command: list[str]
    log_dir: Path | None = None
    bind: bool = True


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (shared with `shoal testbed`)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (1-65535)")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number above 0 (nan and inf would never fire as a timeout)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def assignment(text: str) -> tuple[str, str]:
    """argparse type: ``KEY=VALUE`` as a pair."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not of the form KEY=VALUE")
    return key, value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shoal run",
        description="Start N ranks of a command on this machine.",
    )
    p.add_argument(
        "-n", "--nprocs", "--nproc-per-node", type=positive_int, required=True, help="number of ranks (on this machine)"
    )
    p.add_argument("--master-port", type=_port, help="store port of rank 0 (default: a free port)")
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with [rank]: ")
    p.add_argument(
        "--log-dir",
        type=Path,
        metavar="DIR",
        help="also write each rank's output to DIR/rank-N.log (created if needed)",
    )
    p.add_argument("--timeout", type=positive_float, help="stop all ranks after this many seconds (exit 124)")
    p.add_argument(
        "--bind",
        choices=("cores", "none"),
        default="cores",
        help="cores (default): bind each rank to its own share of the cores while the ranks fit them; "
        "none: leave placement to the kernel",
    )
    p.add_argument(
        "--env", type=assignment, action="append", default=[], metavar="K=V", help="extra environment variable"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after an optional --)")
    return p


def parse_args(argv: list[str]) -> Options:
    """Parses `shoal run` arguments; exits via argparse (code 2) on errors."""
    parser = _parser()
    ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("no command given (usage: shoal run -n N [options] -- cmd args...)")
    missing = missing_program(command[0])
    if missing:
        parser.error(missing)
    return Options(
        nprocs=ns.nprocs,
        master_port=ns.master_port or free_port(),
        prefix=not ns.no_prefix,
        timeout=ns.timeout,
        env=dict(ns.env),
        command=resolve_command(command),
        log_dir=ns.log_dir,
        bind=ns.bind == "cores",
    )


def missing_program(first: str) -> str | None:
    """Why the ranks could not start ``first``, found before any rank is started
    (otherwise every rank fails alike, N times); None if it looks runnable."""
    if first.endswith(".py"):
        return None if os.path.isfile(first) else f"{first}: no such file"
    if first in PYTHON_NAMES or os.sep in first or shutil.which(first):
        return None
    return f"{first}: command not found on PATH"


def resolve_command(command: list[str]) -> list[str]:
    """The command as the ranks run it: a Python file, or a bare ``python``, runs
    with this interpreter; anything else as given (found on ``PATH``)."""
    first = command[0]
    if first.endswith(".py"):
        return [sys.executable, *command]
    if first in PYTHON_NAMES:
        return [sys.executable, *command[1:]]
    return command


def free_port() -> int:
    """A TCP port that is free on all interfaces right now (rank 0 binds 0.0.0.0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def new_secret() -> str:
    """A fresh job secret: 32 random bytes in hex (what `shoal secret` prints)."""
    return secrets.token_hex(32)


def give_secret(env: dict[str, str], secret: str) -> None:
    """Hands the job its secret in `env`, unless the user already chose one
    (``SHOAL_SECRET``, or a file with ``SHOAL_SECRET_FILE``)."""
    if not env.get("SHOAL_SECRET") and not env.get("SHOAL_SECRET_FILE"):
        env["SHOAL_SECRET"] = secret


def rank_env(opts: Options, rank: int, job_id: str, secret: str | None = None) -> dict[str, str]:
    """The environment of one rank: ours, the rank variables, the job's secret, then --env."""
    env = dict(os.environ)
    give_secret(env, secret or new_secret())
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(opts.nprocs),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(opts.nprocs),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(opts.master_port),
        SHOAL_JOB_ID=job_id,
        PYTHONUNBUFFERED="1",
    )
    env.update(opts.env)
    return env


def exit_code(returncode: int) -> int:
    """A child's status as a shell reports it: death by signal N becomes 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    """'exited with code 3' or 'was killed by signal 9 (SIGKILL)'."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown"
    return f"was killed by signal {-returncode} ({name})"


def _log(message: str, name: str = "shoal run") -> None:
    print(f"{name}: {message}", file=sys.stderr, flush=True)


def _write(dst: TextIO, data: bytes) -> None:
    """Writes raw bytes to a text stream (through its buffer when it has one)."""
    buffer = getattr(dst, "buffer", None)
    if buffer is not None:
        buffer.write(data)
    else:
        dst.write(data.decode(errors="replace"))
    dst.flush()


@dataclass
class RankLog:
    """One rank's log file (``--log-dir``), shared by its stdout and stderr readers."""

    file: BinaryIO
    lock: threading.Lock = field(default_factory=threading.Lock)

    def write(self, line: bytes) -> None:
        with self.lock:
            # A grandchild may hold the pipe open past close(); its late lines go to the console only.
            if not self.file.closed:
                self.file.write(line)
                self.file.flush()


def _pump(src: IO[bytes], dst: TextIO, prefix: bytes, lock: threading.Lock, log: RankLog | None = None) -> None:
    """Copies `src` to `dst` line by line, each line prefixed, whole lines at a
    time; and to `log`, unprefixed, when given."""
    console = True
    with src:
        for line in iter(src.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            if console:
                with lock:
                    try:
                        _write(dst, prefix + line)
                    except BrokenPipeError:
                        # The reader left (`shoal run ... | head`): the rank's
                        # output still drains (it must not block on a full
                        # pipe) and goes to its log, not to the console.
                        console = False
            if log is not None:
                log.write(line)


@dataclass
class RankSpec:
    """How to start one rank: its command line, its complete environment, and
    the CPUs it is bound to (None: not bound)."""

    argv: list[str]
    env: dict[str, str]
    cpus: frozenset[int] | None = None


def rank_specs(opts: Options, job_id: str | None = None) -> list[RankSpec]:
    """The ranks of `shoal run`: the same command on every rank, with its rank
    environment, each bound to its share of the cores (when `opts.bind`)."""
    job_id = job_id or uuid.uuid4().hex
    secret = new_secret()
    specs = [RankSpec(list(opts.command), rank_env(opts, rank, job_id, secret)) for rank in range(opts.nprocs)]
    shares = core_shares(opts.nprocs, os.sched_getaffinity(0)) if opts.bind else None
    if shares is not None:
        host_cpus = str(usable_cpus())
        for spec, share in zip(specs, shares):
            spec.cpus = share
            # a bound rank sees only its share (the user's own value stands)
            spec.env.setdefault("SHOAL_HOST_CPUS", host_cpus)
    return specs


def cores(cpus: set[int]) -> list[frozenset[int]]:
    """`cpus` grouped by physical core (a core's hardware threads together),
    in the order of their lowest CPU numbers."""
    by_core: dict[str, set[int]] = {}
    for cpu in sorted(cpus):
        try:
            siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            siblings = str(cpu)  # (no topology: every CPU a core)
        by_core.setdefault(siblings, set()).add(cpu)
    return [frozenset(c) for c in by_core.values()]


def core_shares(nprocs: int, cpus: set[int]) -> list[frozenset[int]] | None:
    """The CPUs of each of `nprocs` ranks: the cores of `cpus` split into
    consecutive equal shares, the first ranks one core more when they do not
    divide evenly; None when the ranks outnumber the cores."""
    whole = cores(cpus)
    if not 0 < nprocs <= len(whole):
        return None
    per, extra = divmod(len(whole), nprocs)
    shares, at = [], 0
    for rank in range(nprocs):
        n = per + (1 if rank < extra else 0)
        shares.append(frozenset().union(*whole[at : at + n]))
        at += n
    return shares


def usable_cpus() -> int:
    """The CPUs this process may use, as the core counts them when no rank is
    bound (Rust's ``available_parallelism``): its affinity, capped by a
    cgroup v2 CPU quota."""
    n = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            n = min(n, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return n


@contextlib.contextmanager
def bound_to(cpus: frozenset[int] | None) -> Iterator[None]:
    """Binds the calling thread to `cpus` while active, so a process it starts
    inherits the binding from its first instruction (None: no change)."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)  # (this thread's: the reader threads keep theirs)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@dataclass
class RankGroup:
    """The ranks of one job: their processes and output reader threads.

    Each rank runs in its own session (process group), so signals reach the
    processes it spawns too, and a Ctrl-C in the terminal reaches the ranks
    only through the launcher's forwarding, exactly once. ``name`` starts the
    supervisor's own messages (``shoal run: rank 1 exited with code 3``).
    With ``log_dir``, rank N's output also goes to ``log_dir/rank-N.log``.
    """

    specs: list[RankSpec]
    prefix: bool = True
    name: str = "shoal run"
    log_dir: Path | None = None
    logs: list[RankLog] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)
    locks: tuple[threading.Lock, threading.Lock] = field(default_factory=lambda: (threading.Lock(), threading.Lock()))

    def open_logs(self) -> None:
        """Creates ``log_dir`` and one ``rank-N.log`` per rank (if `log_dir` is set); raises OSError."""
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.logs = [RankLog(open(self.log_dir / f"rank-{r}.log", "wb")) for r in range(len(self.specs))]

    def start(self) -> None:
        """Starts every rank; raises OSError if a command cannot be run."""
        for rank, spec in enumerate(self.specs):
            with bound_to(spec.cpus):
                proc = subprocess.Popen(
                    spec.argv,
                    env=spec.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            self.procs.append(proc)
            self._read_output(rank, proc)

    def _read_output(self, rank: int, proc: subprocess.Popen[bytes]) -> None:
        """Copies the rank's output through reader threads, so lines of
        different ranks never mix, even with --no-prefix."""
        prefix = f"[{rank}]: ".encode() if self.prefix else b""
        log = self.logs[rank] if self.logs else None
        for src, dst, lock in ((proc.stdout, sys.stdout, self.locks[0]), (proc.stderr, sys.stderr, self.locks[1])):
            assert src is not None
            t = threading.Thread(target=_pump, args=(src, dst, prefix, lock, log), daemon=True)
            t.start()
            self.readers.append(t)

    def running(self) -> list[subprocess.Popen[bytes]]:
        """The processes that have not exited yet."""
        return [p for p in self.procs if p.poll() is None]

    def first_failure(self) -> tuple[int, int] | None:
        """(rank, returncode) of the lowest failed rank among those that exited, if any."""
        for rank, proc in enumerate(self.procs):
            code = proc.poll()
            if code is not None and code != 0:
                return rank, code
        return None

    def signal(self, signum: int) -> None:
        """Sends `signum` to the process group of every running rank."""
        for proc in self.running():
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signum)

    def stop(self, grace: float = GRACE_SECONDS) -> None:
        """SIGTERM to every running rank, SIGKILL to those still alive after `grace`."""
        self.signal(signal.SIGTERM)
        self.wait(grace)
        if self.running():
            self.signal(signal.SIGKILL)
            self.wait(None)

    def wait(self, seconds: float | None) -> bool:
        """Waits up to `seconds` (None: forever) for all ranks; True if all exited."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while self.running():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)
        return True

    def close(self) -> None:
        """Waits briefly for the output readers to drain (a grandchild may hold a pipe open)."""
        for t in self.readers:
            t.join(timeout=1.0)
        for log in self.logs:
            with log.lock:
                log.file.close()


@contextlib.contextmanager
def forwarded_signals(group: RankGroup) -> Iterator[list[int]]:
    """Forwards SIGINT/SIGTERM to the ranks while active; yields the list of signals received.

    A second signal escalates to SIGKILL. Handlers can only be installed from
    the main thread; elsewhere (e.g. tests calling `main` in a thread) nothing
    is forwarded.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, _frame: object) -> None:
        group.signal(signal.SIGKILL if received else signum)
        received.append(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def supervise(group: RankGroup, timeout: float | None, received: list[int]) -> int:
    """Watches the ranks until all succeed, one fails, a signal arrives or time runs out; returns the exit code."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if received:
            return _after_signal(group, received[0])
        failure = group.first_failure()
        if failure is not None:
            return _after_failure(group, *failure)
        if not group.running():
            return 0
        if deadline is not None and time.monotonic() >= deadline:
            _log(f"timed out after {timeout:g}s; stopping all {len(group.procs)} ranks", group.name)
            group.stop()
            return EXIT_TIMEOUT
        time.sleep(POLL_SECONDS)


def _after_failure(group: RankGroup, rank: int, returncode: int) -> int:
    others = len(group.running())
    suffix = f"; stopping the other {others} rank(s)" if others else ""
    _log(f"rank {rank} {describe_exit(returncode)}{suffix}", group.name)
    group.stop()
    return exit_code(returncode)


def _after_signal(group: RankGroup, signum: int) -> int:
    """The signal was already forwarded; give the ranks the grace period, then kill."""
    if not group.wait(GRACE_SECONDS):
        _log(f"ranks still running {GRACE_SECONDS:g}s after {signal.Signals(signum).name}; killing them", group.name)
        group.signal(signal.SIGKILL)
        group.wait(None)
    return 128 + signum


def launch(
    specs: list[RankSpec],
    *,
    prefix: bool = True,
    timeout: float | None = None,
    name: str = "shoal run",
    command_name: str | None = None,
    log_dir: Path | None = None,
) -> int:
    """Starts the ranks of `specs` (rank i runs ``specs[i]``) and supervises them to the end.

    Output is prefixed with ``[rank]: `` unless `prefix` is false; the first
    failing rank's exit code is returned and the others are stopped; SIGINT and
    SIGTERM are forwarded; after `timeout` seconds everything is stopped and
    124 returned; 127 if a command cannot be started (`command_name` names it
    in the message, by default the first word of the first command); with
    `log_dir`, rank N's output also goes to ``log_dir/rank-N.log``.
    """
    group = RankGroup(specs, prefix=prefix, name=name, log_dir=log_dir)
    try:
        group.open_logs()
    except OSError as e:
        _log(f"cannot write rank logs to {log_dir}: {e.strerror or e}", name)
        group.close()
        return EXIT_USAGE
    with forwarded_signals(group) as received:
        try:
            group.start()
        except OSError as e:
            what = command_name or (specs[0].argv[0] if specs else "?")
            _log(f"cannot start {what!r}: {e.strerror or e}", name)
            group.stop()
            group.close()
            return EXIT_CANNOT_START
        code = supervise(group, timeout, received)
    group.close()
    return code


def main(argv: list[str]) -> int:
    """Runs `shoal run` with `argv` (the arguments after `run`); returns the exit code."""
    try:
        opts = parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2
    return launch(rank_specs(opts), prefix=opts.prefix, timeout=opts.timeout, log_dir=opts.log_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
