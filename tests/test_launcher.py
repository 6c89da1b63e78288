"""Tests of `shoal run` (python/shoal/launcher.py).

The launcher is loaded as a standalone module file, so these tests need
neither the compiled extension nor `shoal/__init__.py`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parent.parent / "python" / "shoal" / "launcher.py"

# Loads launcher.py by path (registered in sys.modules, which dataclasses need) and runs main.
RUNNER = (
    "import importlib.util, sys; "
    "spec = importlib.util.spec_from_file_location('shoal_launcher', sys.argv[1]); "
    "m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m); "
    "sys.exit(m.main(sys.argv[2:]))"
)


def load_launcher():
    spec = importlib.util.spec_from_file_location("shoal_launcher_test", LAUNCHER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def launcher_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", RUNNER, str(LAUNCHER), *args]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(launcher_cmd(*args), capture_output=True, text=True, timeout=timeout)


def py(code: str) -> list[str]:
    """A rank command running `code` in Python."""
    return [sys.executable, "-c", textwrap.dedent(code)]


def by_rank(output: str) -> dict[int, list[str]]:
    """Groups prefixed output lines by rank."""
    lines: dict[int, list[str]] = {}
    for line in output.splitlines():
        assert line.startswith("["), line
        rank, _, text = line[1:].partition("]: ")
        lines.setdefault(int(rank), []).append(text)
    return lines


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for_file(path: Path, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout}s")


def test_environment_of_each_rank():
    code = """
        import json, os
        keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "SHOAL_JOB_ID", "PYTHONUNBUFFERED", "EXTRA"]
        print(json.dumps({k: os.environ.get(k) for k in keys}))
    """
    proc = run("-n", "3", "--env", "EXTRA=a=b", "--", *py(code))
    assert proc.returncode == 0, proc.stderr
    envs = {rank: json.loads(lines[0]) for rank, lines in by_rank(proc.stdout).items()}
    assert sorted(envs) == [0, 1, 2]
    for rank, env in envs.items():
        assert (env["RANK"], env["LOCAL_RANK"]) == (str(rank), str(rank))
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("3", "3")
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert 0 < int(env["MASTER_PORT"]) < 65536
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["EXTRA"] == "a=b"
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 1
    job_ids = {e["SHOAL_JOB_ID"] for e in envs.values()}
    assert len(job_ids) == 1 and len(job_ids.pop()) == 32


def test_master_port_option_and_fresh_job_ids():
    code = "import os; print(os.environ['MASTER_PORT'], os.environ['SHOAL_JOB_ID'])"
    first = run("-n", "1", "--master-port", "23456", *py(code))
    second = run("-n", "1", "--master-port", "23456", *py(code))
    (port1, job1), (port2, job2) = (r.stdout.split("]: ")[1].split() for r in (first, second))
    assert port1 == port2 == "23456"
    assert job1 != job2


def test_output_is_prefixed_and_streams_kept_apart():
    code = """
        import os, sys
        r = os.environ["RANK"]
        for i in range(3):
            print(f"out {r} {i}")
            print(f"err {r} {i}", file=sys.stderr)
        sys.stdout.write("no newline")
    """
    proc = run("-n", "2", *py(code))
    assert proc.returncode == 0, proc.stderr
    out, err = by_rank(proc.stdout), by_rank(proc.stderr)
    for r in (0, 1):
        assert out[r] == [f"out {r} 0", f"out {r} 1", f"out {r} 2", "no newline"]
        assert err[r] == [f"err {r} 0", f"err {r} 1", f"err {r} 2"]


def test_no_prefix_passes_output_through():
    proc = run("-n", "2", "--no-prefix", "--", *py("print('hello')"))
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["hello", "hello"]


def test_a_reader_that_leaves_early_stops_only_the_console_output(tmp_path: Path):
    # `shoal run ... | head -1`: the ranks run to their end, their output
    # still reaches their logs, and the launcher prints no traceback.
    code = """
        for i in range(20000):
            print(i)
        print("last")
    """
    proc = subprocess.Popen(
        launcher_cmd("-n", "2", "--log-dir", str(tmp_path), *py(code)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"[")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    for log in sorted(tmp_path.iterdir()):
        assert log.read_text().splitlines()[-1] == "last", log


def test_command_without_separator_keeps_its_own_options():
    proc = run("-n", "1", sys.executable, "-c", "import sys; print(sys.argv[1:])", "--timeout", "-n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0]: ['--timeout', '-n']"


def test_exit_code_of_failing_rank_is_propagated():
    proc = run("-n", "3", *py("import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)"))
    assert proc.returncode == 3
    assert "rank 1 exited with code 3" in proc.stderr


def test_signal_death_maps_to_128_plus_signum():
    proc = run("-n", "1", *py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert proc.returncode == 128 + signal.SIGKILL
    assert "rank 0 was killed by signal 9 (SIGKILL)" in proc.stderr


def test_siblings_are_stopped_when_one_rank_fails(tmp_path: Path):
    code = f"""
        import os, sys, time
        if os.environ["RANK"] == "0":
            open("{tmp_path}/sleeper", "w").write(f"{{os.getpid()}}\\n")
            time.sleep(60)
        while not os.path.exists("{tmp_path}/sleeper"):
            time.sleep(0.01)
        sys.exit(5)
    """
    start = time.monotonic()
    proc = run("-n", "2", *py(code))
    elapsed = time.monotonic() - start
    assert proc.returncode == 5, proc.stderr
    assert "rank 1 exited with code 5; stopping the other 1 rank(s)" in proc.stderr
    assert elapsed < 15, f"took {elapsed:.1f}s"
    assert not pid_alive(int((tmp_path / "sleeper").read_text()))


def test_sibling_ignoring_sigterm_is_killed_after_grace(tmp_path: Path):
    code = f"""
        import os, signal, sys, time
        if os.environ["RANK"] == "0":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open("{tmp_path}/stubborn", "w").write(f"{{os.getpid()}}\\n")
            time.sleep(60)
        while not os.path.exists("{tmp_path}/stubborn"):
            time.sleep(0.01)
        sys.exit(2)
    """
    start = time.monotonic()
    proc = run("-n", "2", *py(code))
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    assert 2.5 < elapsed < 15, f"took {elapsed:.1f}s"
    assert not pid_alive(int((tmp_path / "stubborn").read_text()))


def test_grandchildren_are_stopped_too(tmp_path: Path):
    # A shell that starts `sleep` in the background: the sleep is in the rank's process group.
    script = f"sleep 60 & echo $! > {tmp_path}/grandchild; wait"
    code = f"""
        import os, subprocess, sys, time
        if os.environ["RANK"] == "0":
            subprocess.call(["sh", "-c", "{script}"])
        while not os.path.exists("{tmp_path}/grandchild"):
            time.sleep(0.01)
        time.sleep(0.2)
        sys.exit(1)
    """
    proc = run("-n", "2", *py(code))
    assert proc.returncode == 1, proc.stderr
    time.sleep(0.2)
    assert not pid_alive(int((tmp_path / "grandchild").read_text()))


def test_timeout_stops_everything(tmp_path: Path):
    code = f"""
        import os, time
        open("{tmp_path}/pid" + os.environ["RANK"], "w").write(f"{{os.getpid()}}\\n")
        time.sleep(60)
    """
    start = time.monotonic()
    proc = run("-n", "2", "--timeout", "1", *py(code))
    elapsed = time.monotonic() - start
    assert proc.returncode == 124
    assert "timed out after 1s" in proc.stderr
    assert elapsed < 15, f"took {elapsed:.1f}s"
    for r in (0, 1):
        assert not pid_alive(int((tmp_path / f"pid{r}").read_text()))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signals_to_launcher_are_forwarded(tmp_path: Path, signum: int):
    code = f"""
        import os, signal, sys, time
        def bye(s, f):
            print("got", signal.Signals(s).name, flush=True)
            sys.exit(0)
        signal.signal(signal.SIGINT, bye)
        signal.signal(signal.SIGTERM, bye)
        open("{tmp_path}/ready" + os.environ["RANK"], "w").write("\\n")
        time.sleep(60)
    """
    launcher = subprocess.Popen(launcher_cmd("-n", "2", *py(code)), stdout=subprocess.PIPE, text=True)
    for r in (0, 1):
        wait_for_file(tmp_path / f"ready{r}")
    launcher.send_signal(signum)
    out, _ = launcher.communicate(timeout=20)
    assert launcher.returncode == 128 + signum
    name = signal.Signals(signum).name
    assert sorted(out.splitlines()) == [f"[0]: got {name}", f"[1]: got {name}"]


def test_unknown_command_and_bad_arguments():
    proc = run("-n", "2", "--", "/nonexistent/program")
    assert proc.returncode == 127
    assert "cannot start '/nonexistent/program'" in proc.stderr
    assert run("-n", "0", "true").returncode == 2
    assert run("-n", "1").returncode == 2
    assert run("-n", "1", "--env", "NOEQUALS", "true").returncode == 2


def test_helpers_in_process():
    launcher = load_launcher()
    assert launcher.exit_code(-15) == 143 and launcher.exit_code(7) == 7
    assert launcher.describe_exit(-9) == "was killed by signal 9 (SIGKILL)"
    opts = launcher.parse_args(["-n", "2", "--env", "A=1", "--", "echo", "--", "x"])
    assert opts.command == ["echo", "--", "x"] and opts.env == {"A": "1"}
    env = launcher.rank_env(opts, 1, "job")
    assert (env["RANK"], env["A"], env["SHOAL_JOB_ID"]) == ("1", "1", "job")
    assert launcher.main(["-n", "1", "--", sys.executable, "-c", "raise SystemExit(4)"]) == 4


def test_each_job_gets_a_fresh_secret():
    code = "import os; print(os.environ.get('SHOAL_SECRET'))"
    env = {k: v for k, v in os.environ.items() if k not in ("SHOAL_SECRET", "SHOAL_SECRET_FILE")}
    jobs = []
    for _ in range(2):
        proc = subprocess.run(launcher_cmd("-n", "2", *py(code)), env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        secrets = {lines[0] for lines in by_rank(proc.stdout).values()}
        assert len(secrets) == 1, secrets  # every rank of a job holds the same one
        jobs.append(secrets.pop())
    assert jobs[0] != jobs[1]
    assert all(len(s) == 64 and int(s, 16) >= 0 for s in jobs)


def test_a_secret_the_user_chose_is_kept():
    code = "import os; print(os.environ.get('SHOAL_SECRET'), os.environ.get('SHOAL_SECRET_FILE'))"
    base = {k: v for k, v in os.environ.items() if k not in ("SHOAL_SECRET", "SHOAL_SECRET_FILE")}
    cases = [
        ({"SHOAL_SECRET": "mine-0123456789abcdef"}, [], "mine-0123456789abcdef None"),
        ({"SHOAL_SECRET_FILE": "/path/to/secret"}, [], "None /path/to/secret"),
        ({}, ["--env", "SHOAL_SECRET=given-0123456789abcdef"], "given-0123456789abcdef None"),
    ]
    for extra, args, expected in cases:
        proc = subprocess.run(
            launcher_cmd("-n", "1", *args, *py(code)), env={**base, **extra}, capture_output=True, text=True, timeout=60
        )
        assert proc.stdout.strip() == f"[0]: {expected}", (extra, args, proc.stdout, proc.stderr)


def test_shoal_secret_prints_a_new_secret():
    outs = [
        subprocess.run([sys.executable, "-m", "shoal.cli", "secret"], capture_output=True, text=True, timeout=60)
        for _ in range(2)
    ]
    secrets = [o.stdout.strip() for o in outs]
    assert all(o.returncode == 0 for o in outs) and secrets[0] != secrets[1]
    assert all(len(s) == 64 and int(s, 16) >= 0 for s in secrets)
    bad = subprocess.run([sys.executable, "-m", "shoal.cli", "secret", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage: shoal secret" in bad.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "soon"])
def test_bad_timeouts_are_refused(value: str):
    proc = run("-n", "1", f"--timeout={value}", "--", "true")
    assert proc.returncode == 2
    assert "--timeout" in proc.stderr and value in proc.stderr, proc.stderr


def test_a_python_file_runs_with_this_interpreter(tmp_path: Path):
    """`shoal run -n 2 train.py`: the file need not be executable, and runs with sys.executable."""
    script = tmp_path / "train.py"
    script.write_text("import sys; print(sys.executable, sys.argv[1:])\n")
    script.chmod(0o644)
    proc = run("-n", "2", str(script), "--lr", "1")
    assert proc.returncode == 0, proc.stderr
    assert by_rank(proc.stdout) == {r: [f"{sys.executable} ['--lr', '1']"] for r in (0, 1)}


def test_a_bare_python_is_this_interpreter_not_the_one_on_path(tmp_path: Path):
    impostor = tmp_path / "python"
    impostor.write_text("#!/bin/sh\necho impostor\n")
    impostor.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ.get('PATH', '')}"}
    code = "import sys; print(sys.executable)"
    proc = subprocess.run(launcher_cmd("-n", "1", "python", "-c", code), env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"[0]: {sys.executable}"


def test_nproc_per_node_is_an_alias_of_n():
    proc = run("--nproc-per-node", "3", *py("import os; print(os.environ['WORLD_SIZE'])"))
    assert proc.returncode == 0, proc.stderr
    assert by_rank(proc.stdout) == {r: ["3"] for r in range(3)}


def test_log_dir_keeps_each_ranks_output(tmp_path: Path):
    logs = tmp_path / "logs" / "job"
    code = """
        import os, sys
        rank = os.environ['RANK']
        print('out', rank, flush=True)
        print('err', rank, file=sys.stderr, flush=True)
    """
    proc = run("-n", "2", "--log-dir", str(logs), *py(code))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in logs.iterdir()) == ["rank-0.log", "rank-1.log"]
    for r in (0, 1):
        assert sorted((logs / f"rank-{r}.log").read_text().splitlines()) == [f"err {r}", f"out {r}"]
    # The console still gets every line, prefixed.
    assert by_rank(proc.stdout) == {0: ["out 0"], 1: ["out 1"]}


def test_an_unwritable_log_dir_is_refused_before_starting(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    marker = tmp_path / "started"
    proc = run("-n", "1", "--log-dir", str(blocker / "logs"), *py(f"open({str(marker)!r}, 'w')"))
    assert proc.returncode == 2
    assert "cannot write rank logs" in proc.stderr and str(blocker) in proc.stderr, proc.stderr
    assert not marker.exists()


AFFINITY = """
    import json, os
    print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)), "host": os.environ.get("SHOAL_HOST_CPUS")}))
"""


def affinities(*args: str) -> dict[int, dict]:
    proc = run(*args, "--", *py(AFFINITY))
    assert proc.returncode == 0, proc.stderr
    return {rank: json.loads(lines[0]) for rank, lines in by_rank(proc.stdout).items()}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_ranks_that_fit_the_cores_are_bound_to_shares_of_them():
    launcher = load_launcher()
    mine = os.sched_getaffinity(0)
    seen = affinities("-n", "2")
    shares = [set(seen[r]["cpus"]) for r in (0, 1)]
    assert shares == [set(s) for s in launcher.core_shares(2, mine)]
    # disjoint, non-empty, and together every CPU this launcher may use
    assert shares[0] and shares[1] and not shares[0] & shares[1] and shares[0] | shares[1] == mine
    # a bound rank sees its share only: the ranks are told the machine's count
    assert {seen[r]["host"] for r in (0, 1)} == {str(launcher.usable_cpus())}


def test_ranks_are_not_bound_when_asked_or_when_they_outnumber_the_cores():
    mine = sorted(os.sched_getaffinity(0))
    for args in (["-n", "2", "--bind", "none"], ["-n", str(len(mine) + 1)]):
        seen = affinities(*args)
        assert all(s["cpus"] == mine and s["host"] is None for s in seen.values()), (args, seen)


def test_shares_are_whole_cores_split_evenly():
    launcher = load_launcher()
    # CPUs with no topology in sysfs: each is a core of its own
    cpus = set(range(5000, 5016))
    shares = launcher.core_shares(3, cpus)
    assert [sorted(s) for s in shares] == [list(range(5000, 5006)), list(range(5006, 5011)), list(range(5011, 5016))]
    assert launcher.core_shares(17, cpus) is None and launcher.core_shares(16, cpus)[15] == {5015}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_bound_rank_counts_the_machines_cpus_not_its_share():
    pytest.importorskip("shoal._shoal")
    # the machine class of the tuning rows (and whether the host's ranks fit
    # their cores: how shm waits spin, whether large messages are split)
    code = """
        from shoal import _shoal
        print(_shoal.tune_tables("")["cpus"])
    """
    launcher = load_launcher()
    proc = run("-n", "2", "--", *py(code))
    assert proc.returncode == 0, proc.stderr
    assert {lines[0] for lines in by_rank(proc.stdout).values()} == {str(launcher.usable_cpus())}
