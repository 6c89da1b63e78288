"""The CUDA path of the torch backend: its staging pool and chunked pipeline
on the CPU (with the host copy engine, real shoal ranks and real
collectives), and on a GPU when there is one. Skipped without torch."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import launch, spawn_ranks  # noqa: E402

from shoal.torch._staging import MIN_CLASS, StagingPool, pageable, size_class  # noqa: E402

# ---------------------------------------------------------------------------
# The staging pool


def test_size_classes_are_powers_of_two_from_the_minimum() -> None:
    assert size_class(0) == size_class(1) == size_class(MIN_CLASS) == MIN_CLASS
    assert size_class(MIN_CLASS + 1) == 2 * MIN_CLASS
    assert size_class(3 << 20) == 4 << 20 and size_class(4 << 20) == 4 << 20


def test_a_buffer_given_back_is_lent_again_for_its_class() -> None:
    pool = StagingPool(1 << 20, pageable)
    a = pool.acquire(1000)
    assert a is not None and a.nbytes == MIN_CLASS
    ptr = a.buffer.data_ptr()
    a.release(pending="copy")
    a.release()  # a second release does nothing
    b = pool.acquire(MIN_CLASS)
    assert b is not None and b.buffer.data_ptr() == ptr and b.pending == "copy"
    assert pool.allocations == 1 and pool.lent_bytes == MIN_CLASS
    b.release()
    assert pool.lent_bytes == 0 and pool.held_bytes == MIN_CLASS


def test_regions_are_aligned_and_typed() -> None:
    pool = StagingPool(1 << 20, pageable)
    lease = pool.acquire(1000)
    assert lease is not None
    x, y = lease.regions([(torch.bfloat16, 3), (torch.complex128, 5)])
    assert x.dtype == torch.bfloat16 and x.numel() == 3 and y.dtype == torch.complex128 and y.numel() == 5
    assert (y.data_ptr() - x.data_ptr()) % 64 == 0 and y.data_ptr() >= x.data_ptr() + 6
    with pytest.raises(ValueError, match="do not fit"):
        lease.regions([(torch.float64, MIN_CLASS)])


def test_the_pool_never_holds_more_than_its_capacity() -> None:
    pool = StagingPool(4 * MIN_CLASS, pageable)
    leases = [pool.acquire(MIN_CLASS) for _ in range(4)]
    assert pool.acquire(1, block=False) is None  # everything is lent
    leases[0].release()  # type: ignore[union-attr]
    # an idle buffer of another class is freed to make room for a larger one
    big = pool.acquire(2 * MIN_CLASS, block=False)
    assert big is None  # one idle (64 KiB) + 3 lent: freeing it leaves room for 64 KiB only
    leases[1].release()  # type: ignore[union-attr]
    big = pool.acquire(2 * MIN_CLASS, block=False)
    assert big is not None and pool.held_bytes == 4 * MIN_CLASS
    for lease in [big, *leases[2:]]:
        lease.release()  # type: ignore[union-attr]
    assert pool.lent_bytes == 0 and pool.held_bytes <= pool.capacity


def test_a_request_that_does_not_fit_waits_for_a_buffer_to_come_back() -> None:
    pool = StagingPool(2 * MIN_CLASS, pageable)
    held = [pool.acquire(MIN_CLASS), pool.acquire(MIN_CLASS)]
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(MIN_CLASS)))
    waiter.start()
    time.sleep(0.2)
    assert not got and waiter.is_alive()
    held[0].release()  # type: ignore[union-attr]
    waiter.join(5)
    assert got and got[0] is not None


def test_a_request_larger_than_the_capacity_is_served_alone_and_not_kept() -> None:
    pool = StagingPool(2 * MIN_CLASS, pageable)
    small = pool.acquire(MIN_CLASS)
    assert pool.acquire(8 * MIN_CLASS, block=False) is None  # something else is lent
    small.release()  # type: ignore[union-attr]
    huge = pool.acquire(8 * MIN_CLASS, block=False)
    assert huge is not None and huge.nbytes == 8 * MIN_CLASS
    huge.release()
    assert pool.held_bytes == 0 and pool.lent_bytes == 0


def test_a_failed_allocation_changes_nothing() -> None:
    def failing(nbytes: int) -> torch.Tensor:
        raise RuntimeError("out of pinned memory")

    pool = StagingPool(4 * MIN_CLASS, failing)
    with pytest.raises(RuntimeError, match="out of pinned memory"):
        pool.acquire(10)
    assert pool.held_bytes == 0 and pool.lent_bytes == 0


@pytest.mark.parametrize("classes", [1, 3])
def test_threads_sharing_a_pool_stay_within_its_capacity(classes: int) -> None:
    pool = StagingPool(6 * MIN_CLASS, pageable)
    worst = [0]
    errors: list[BaseException] = []

    def borrow(seed: int) -> None:
        try:
            for i in range(200):
                lease = pool.acquire(MIN_CLASS * (1 + (seed + i) % classes))
                assert lease is not None
                worst[0] = max(worst[0], pool.held_bytes)
                lease.buffer[:8].fill_(seed)  # the buffer is this thread's alone while lent
                assert int(lease.buffer[:8].sum()) == 8 * seed
                lease.release()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=borrow, args=(s,)) for s in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert worst[0] <= pool.capacity and pool.lent_bytes == 0
    if classes == 1:
        assert pool.allocations <= 6  # buffers of one class are only ever reused


# ---------------------------------------------------------------------------
# The pipeline on CPU tensors (host copy engine), real ranks


def test_chunk_bounds_cover_every_element_once() -> None:
    from shoal.torch._pipeline import chunk_bounds

    assert chunk_bounds(0, 4, 4096) == []
    assert chunk_bounds(5, 4, 4096) == [(0, 5)]
    assert chunk_bounds(2048, 4, 4096) == [(0, 1024), (1024, 2048)]
    assert chunk_bounds(3001, 4, 4096) == [(0, 1024), (1024, 2048), (2048, 3001)]
    assert chunk_bounds(3, 16, 8) == [(0, 1), (1, 2), (2, 3)]  # at least one element per chunk
    for numel, itemsize, size in [(9001, 1, 4096), (777, 8, 4096), (10**6, 2, 1 << 20)]:
        bounds = chunk_bounds(numel, itemsize, size)
        assert bounds[0][0] == 0 and bounds[-1][1] == numel
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
        assert all((b - a) * itemsize <= size for a, b in bounds)


@pytest.mark.parametrize("world", [2, 3])
def test_pipeline_results_match_a_reference(world: int) -> None:
    proc = launch(world, "torch_pipeline.py", "results", env={"SHOAL_TIMEOUT": "60"})
    assert proc.stdout.count("OK torch pipeline") == world, proc.stdout[-2000:]


@pytest.mark.parametrize("world", [2, 3])
def test_process_group_calls_through_the_pipeline(world: int) -> None:
    env = {"SHOAL_TIMEOUT": "60", "SHOAL_TORCH_CUDA_CHUNK_BYTES": "4096", "CUDA_VISIBLE_DEVICES": ""}
    proc = launch(world, "torch_pipeline.py", "group", env=env)
    assert proc.stdout.count("OK torch pipeline group") == world, proc.stdout[-2000:]


def chunk_algorithms(trace_dir: Path) -> dict[int, set[str]]:
    """Bytes of each all_reduce chunk rank 0 ran (float32, bfloat16, int8, float64 calls) -> its algorithms."""
    events = json.loads((trace_dir / "rank-0.json").read_text())  # a rank's trace: a list of events
    sizes = {"float32": 4, "bfloat16": 2, "int8": 1, "float64": 8}
    found: dict[int, set[str]] = {}
    for e in events:
        args = e.get("args", {})
        if e.get("cat") == "call" and args["collective"] == "allreduce" and args["algorithm"] != "(agreement)":
            found.setdefault(args["count"] * sizes[args["dtype"]], set()).add(args["algorithm"])
    return found


@pytest.mark.parametrize(
    "world,env,large",
    [
        (2, {}, "shm_sharded"),  # the default: shm_sharded from 1 MiB where it can run
        (3, {}, "shm_sharded"),
        (2, {"SHOAL_TRANSPORT": "tcp"}, None),  # it cannot run: the selector's choice
        (2, {"SHOAL_TORCH_CUDA_ALGO": "direct"}, "direct"),
        (2, {"SHOAL_ALGO": "allreduce:ring"}, "ring"),  # the user's SHOAL_ALGO wins over the default
        (2, {"SHOAL_TORCH_CUDA_ALGO": "auto", "SHOAL_ALGO": "allreduce:recursive_doubling"}, "recursive_doubling"),
    ],
)
def test_the_host_algorithm_of_all_reduce_chunks(
    world: int, env: dict[str, str], large: str | None, tmp_path: Path
) -> None:
    full_env = {"SHOAL_TIMEOUT": "60", "SHOAL_TRACE": str(tmp_path), **env}
    proc = launch(world, "torch_pipeline.py", "chunks", env=full_env)
    assert proc.stdout.count("OK torch pipeline chunks") == world, proc.stdout[-2000:]
    found = chunk_algorithms(tmp_path)
    assert 1 << 20 in found and any(size < 1 << 20 for size in found), found  # whole and ragged chunks ran
    for size, algorithms in found.items():
        if large is None:
            assert "shm_sharded" not in algorithms, (size, found)
        elif size >= 1 << 20:
            assert algorithms == {large}, (size, found)


def test_pipeline_failures_fail_the_work_and_give_staging_back() -> None:
    results = spawn_ranks(2, "torch_pipeline.py", "failures", env={"SHOAL_TIMEOUT": "20"})
    for r, p in enumerate(results):
        assert p.returncode == 0, (r, p.stdout, p.stderr[-3000:])
        assert "RAISED" in p.stdout and "mismatched collectives" in p.stdout, (r, p.stdout)
        assert "OK torch pipeline failures" in p.stdout, (r, p.stdout)


def test_wrong_settings_are_errors_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal.torch import _cuda
    from shoal.torch._staging import capacity_from_env

    for name, value in [
        ("SHOAL_TORCH_CUDA_CHUNK_BYTES", "4MiB"),
        ("SHOAL_TORCH_CUDA_CHUNK_BYTES", "100"),
        ("SHOAL_TORCH_CUDA_PIPELINE", "maybe"),
        ("SHOAL_TORCH_CUDA_ALGO", "fastest"),
    ]:
        with monkeypatch.context() as m:
            m.setenv(name, value)
            _cuda.settings.cache_clear()
            with pytest.raises(ValueError, match=f'{name}="{value}"'):
                _cuda.settings()
    _cuda.settings.cache_clear()
    monkeypatch.setenv("SHOAL_TORCH_CUDA_PIPELINE", "off")
    monkeypatch.setenv("SHOAL_TORCH_CUDA_CHUNK_BYTES", "65536")
    monkeypatch.setenv("SHOAL_TORCH_CUDA_ALGO", " ring ")
    assert _cuda.settings() == _cuda.Settings(enabled=False, chunk_bytes=65536, algorithm="ring")
    _cuda.settings.cache_clear()
    monkeypatch.setenv("SHOAL_TORCH_STAGING_BYTES", "lots")
    with pytest.raises(ValueError, match='SHOAL_TORCH_STAGING_BYTES="lots"'):
        capacity_from_env()


def test_cpu_tensors_never_take_the_pipeline() -> None:
    from shoal.torch import _cuda

    assert not _cuda.takes([torch.ones(3)]) and not _cuda.takes([])


# ---------------------------------------------------------------------------
# On a GPU


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@needs_cuda
@pytest.mark.parametrize("chunk_bytes", ["", "65536"])
def test_cuda_pipeline_on_a_gpu(chunk_bytes: str) -> None:
    env = {"SHOAL_TORCH_CUDA_CHUNK_BYTES": chunk_bytes} if chunk_bytes else {}
    proc = launch(2, "torch_cuda_pipeline.py", env=env)
    assert proc.stdout.count("OK torch cuda pipeline") == 2, proc.stdout[-2000:]


@needs_cuda
def test_cuda_tensors_through_the_host_path_when_the_pipeline_is_off() -> None:
    proc = launch(2, "torch_cuda.py", env={"SHOAL_TORCH_CUDA_PIPELINE": "0"})
    assert proc.stdout.count("OK torch cuda") == 2, proc.stdout[-2000:]


def test_the_benchmark_script_runs_and_prints_its_table() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "examples" / "cuda_allreduce_bench.py"
    args = ["--device", "cpu", "--ranks", "2", "--sizes-mb", "0.1", "--iters", "2", "--warmup", "1"]
    args += ["--backends", "shoal,shoal:ring,gloo"]  # shoal:ALGO forces the host algorithm
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "shoal:ring/gloo speed" in proc.stdout, proc.stdout
    assert re.search(r"\n\s+2\s+0.1(\s+[0-9.]+){3}\s+[0-9.]+x\s+[0-9.]+x\n", proc.stdout), proc.stdout
