"""The torch.distributed backend (`import shoal.torch`): every c10d call, DDP,
FSDP, failures, torchrun, and the examples, on real multi-process jobs.
Skipped when torch is not installed (it is an optional extra)."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from conftest import WORKERS, launch, spawn_ranks

torch = pytest.importorskip("torch")

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(
    n: int, script: str, *args: str, timeout: float = 300, gloo_abort_retries: int = 0
) -> subprocess.CompletedProcess[str]:
    """Runs an example under `shoal run`. `gloo_abort_retries`: for a Gloo
    reference run, how often to run it again when Gloo aborts its process at
    teardown ("terminate called without an active exception" after the last
    epoch: torch 2.15's Gloo, once in a CI run); that is Gloo's failure, not
    the one under test."""
    cmd = [sys.executable, "-m", "shoal.cli", "run", "-n", str(n), "--", sys.executable, str(EXAMPLES / script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    for _ in range(gloo_abort_retries):
        if proc.returncode == 0 or "terminate called without an active exception" not in proc.stdout + proc.stderr:
            break
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def test_importing_shoal_does_not_import_torch() -> None:
    code = "import sys, shoal; assert 'torch' not in sys.modules, 'shoal imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(("world", "transport"), [(2, "shm"), (3, "shm"), (3, "tcp")])
def test_every_c10d_call(world: int, transport: str) -> None:
    proc = launch(world, "torch_collectives.py", env={"SHOAL_TRANSPORT": transport})
    assert proc.stdout.count("OK torch collectives") == world, proc.stdout[-2000:]


@pytest.mark.parametrize("world", [2, 3])
def test_list_form_calls_match_gloo(world: int) -> None:
    """all_gather_coalesced (one output list per rank) and every other list-form
    call, with input counts equal to and different from the world size, exactly as Gloo."""
    proc = launch(world, "torch_list_forms.py")
    assert proc.stdout.count("OK torch list forms") == world, proc.stdout[-2000:]


@pytest.mark.parametrize("world", [2, 3])
def test_sparse_all_reduce_matches_gloo(world: int) -> None:
    proc = launch(world, "torch_sparse.py")
    assert proc.stdout.count("OK torch sparse") == world, proc.stdout[-2000:]


@pytest.mark.parametrize("mode", ["timeout_new_group", "timeout_init"])
def test_group_timeout_is_honoured(mode: str) -> None:
    """new_group(timeout=) and init_process_group(timeout=) bound that group's
    calls, as SHOAL_TIMEOUT does every group's; without one, SHOAL_TIMEOUT."""
    results = spawn_ranks(3, "torch_group_options.py", mode, env={"SHOAL_TIMEOUT": "30"})
    for r, p in enumerate(results):
        assert p.returncode == 0 and "OK timeouts" in p.stdout, (r, p.stdout, p.stderr[-3000:])
    assert "RAISED" in results[0].stdout


@pytest.mark.parametrize("world", [2, 3])
def test_monitored_barrier_names_the_ranks_that_did_not_arrive(world: int) -> None:
    """torch's monitored_barrier semantics (Gloo's messages), and the group's
    device types registered with torch where it lets Python register them."""
    results = spawn_ranks(world, "torch_group_options.py", "monitored", env={"SHOAL_TIMEOUT": "30"})
    for r, p in enumerate(results):
        assert p.returncode == 0 and "OK monitored" in p.stdout, (r, p.stdout, p.stderr[-3000:])


def test_every_op_appears_in_torch_profiler_traces() -> None:
    proc = launch(2, "torch_profiler.py")
    assert proc.stdout.count("OK torch profiler") == 2, proc.stdout[-2000:]


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_matches_single_process_training(world: int) -> None:
    # CPU training. torch's PowerSGD hook calls torch.cuda.synchronize(device) whenever CUDA is
    # available, even for CPU tensors, which fails: hide any GPU so that the test does not depend on one
    proc = launch(world, "torch_ddp.py", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.stdout.count("OK torch ddp") == world, proc.stdout[-2000:]


@pytest.mark.parametrize("world", [2, 3])
def test_fsdp_trains_on_cpu(world: int) -> None:
    proc = launch(world, "torch_fsdp.py")
    assert proc.stdout.count("OK torch fsdp") == world, proc.stdout[-2000:]
    for skipped in sorted(set(re.findall(r"SKIPPED [^\n]*", proc.stdout))):
        warnings.warn(skipped, stacklevel=1)  # a part this torch cannot run on CPU, shown in the summary


def test_under_torchrun_with_process_group_recreated() -> None:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(WORKERS / "torch_smoke.py"),
        "--generations",
        "2",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("OK torch smoke") == 2


def test_under_shoal_run() -> None:
    proc = launch(3, "torch_smoke.py")
    assert proc.stdout.count("OK torch smoke") == 3


def test_mismatched_calls_raise_on_every_rank() -> None:
    results = spawn_ranks(2, "torch_failures.py", "mismatch", env={"SHOAL_TIMEOUT": "30"})
    for r, p in enumerate(results):
        assert p.returncode == 0, p.stderr[-2000:]
        assert "RAISED" in p.stdout and "mismatched collective" in p.stdout, (r, p.stdout)


def test_dead_peer_raises_instead_of_hanging() -> None:
    results = spawn_ranks(2, "torch_failures.py", "die", env={"SHOAL_TIMEOUT": "30"})
    assert results[1].returncode == 3
    assert "RAISED PeerDiedError" in results[0].stdout and "rank 1 died" in results[0].stdout, results[0].stdout


def test_stall_in_a_collective_issued_by_torch_cpp_code_raises_after_shoal_timeout() -> None:
    """DDP's constructor checks parameter shapes with an all_gather that torch's
    C++ code issues and waits for; with a silent peer it must fail like any
    other call after SHOAL_TIMEOUT (on torch 2.4 it used to hang forever)."""
    results = spawn_ranks(2, "torch_failures.py", "stall", env={"SHOAL_TIMEOUT": "3", "STALL_SECONDS": "20"})
    out = results[0].stdout
    assert "RAISED" in out and "ShoalTimeoutError" in out, (out, results[0].stderr[-2000:])
    seconds = float(re.search(r"after ([0-9.]+) s", out).group(1))
    assert 2.5 <= seconds <= 10, out


def test_works_nobody_consumes_are_let_go_once_complete_and_old() -> None:
    """The holder of works (for torch releases that drop a work's Python object
    while C++ holds it) must not keep an abandoned work's tensors forever, nor
    let go of one still running."""
    import time

    from torch.futures import Future

    from shoal.torch._work import ShoalWork, _Keeper

    keeper = _Keeper(needed=True)
    keeper.ABANDONED_AFTER = 0.2
    done, running = Future(), Future()
    done.set_result(None)
    keeper.hold(ShoalWork(done))
    keeper.hold(still_running := ShoalWork(running))
    time.sleep(0.3)
    keeper.hold(recent := ShoalWork(done))
    assert keeper.held() == 2  # the old complete one was let go
    keeper.release(recent)
    keeper.release(still_running)
    assert keeper.held() == 0


@pytest.mark.parametrize("world", [2, 3])
def test_p2p_large_exchange(world: int) -> None:
    """isend before irecv on every rank, 8 MB each: sends must not wait for the receiver."""
    results = spawn_ranks(world, "torch_p2p.py", "exchange", env={"SHOAL_TIMEOUT": "30"})
    for r, p in enumerate(results):
        assert p.returncode == 0 and "OK" in p.stdout and "RAISED" not in p.stdout, (r, p.stdout, p.stderr[-1000:])


@pytest.mark.parametrize("world", [2, 3])
def test_p2p_receive_from_any_source(world: int) -> None:
    """dist.recv and dist.irecv without src (the group's recv_anysource): the
    sender as torch reports it (work._source_rank(), the global rank)."""
    results = spawn_ranks(world, "torch_p2p.py", "any_source", env={"SHOAL_TIMEOUT": "30"})
    for r, p in enumerate(results):
        assert p.returncode == 0 and "OK" in p.stdout and "RAISED" not in p.stdout, (r, p.stdout, p.stderr[-1000:])


def test_p2p_same_tag_different_shapes() -> None:
    results = spawn_ranks(2, "torch_p2p.py", "same_tag", env={"SHOAL_TIMEOUT": "30"})
    for r, p in enumerate(results):
        assert p.returncode == 0 and "OK" in p.stdout and "RAISED" not in p.stdout, (r, p.stdout, p.stderr[-1000:])


def losses(stdout: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in re.findall(r"epoch \d+ loss ([0-9.]+) accuracy ([0-9.]+)", stdout)]


def test_digits_example_same_loss_curve_as_gloo() -> None:
    pytest.importorskip("sklearn")
    args = ["--epochs", "3", "--seed", "1"]
    shoal_run = losses(run_example(2, "digits_ddp.py", "--backend", "shoal", *args).stdout)
    gloo_run = losses(run_example(2, "digits_ddp.py", "--backend", "gloo", *args, gloo_abort_retries=2).stdout)
    assert len(shoal_run) == len(gloo_run) == 3, (shoal_run, gloo_run)
    for (ls, acc_s), (lg, acc_g) in zip(shoal_run, gloo_run):
        assert abs(ls - lg) <= 1e-4 * max(1.0, abs(lg)), (shoal_run, gloo_run)
        assert abs(acc_s - acc_g) <= 0.01, (shoal_run, gloo_run)
    assert shoal_run[-1][0] < shoal_run[0][0], "the loss did not go down"


@pytest.mark.parametrize("backend", ["shoal", "none"])
def test_synthetic_benchmark_runs(backend: str) -> None:
    """``none`` is the compute-only ceiling: the same steps with no process group."""
    pytest.importorskip("torchvision")
    proc = run_example(
        2,
        "pytorch_synthetic_benchmark.py",
        f"--backend={backend}",
        "--batch-size=2",
        "--image-size=32",
        "--num-warmup-batches=1",
        "--num-batches-per-iter=1",
        "--num-iters=2",
        "--threads=1",
    )
    assert re.search(r"Total img/sec on 2 rank\(s\): [0-9.]+", proc.stdout), proc.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_through_host_staging() -> None:
    proc = launch(2, "torch_cuda.py")
    assert proc.stdout.count("OK torch cuda") == 2, proc.stdout[-2000:]
