"""torch's own test class for its distributed backends
(``DistributedTest._DistTestBase``, which torch's
``test/distributed/test_distributed_spawn.py`` runs for Gloo) with every Gloo
group created as a shoal group, on CPU at world size 3, through
tests/workers/torch_dist_suite.py (see there for the shim).

The tests run are the ones Gloo passes on CPU at world size 3 (``GLOO_PASSES``:
the others are skipped by torch's own decorators for Gloo on CPU, or need
GPUs); every one must pass on shoal, except ``test_get_backend``, which checks
that the group's backend is named "gloo". A test a torch release does not
have is left out on that release. ``SHOAL_TORCH_SUITE=full`` runs the whole
class on Gloo and on shoal instead and compares them (about twice as long).
docs/torch.md has the outcome against Gloo. Skipped without torch."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import WORKERS

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal needs it

# The tests Gloo passes on CPU at world size 3 on torch 2.4.1 and on 2.15.0 (with forked ranks):
# `python tests/workers/torch_dist_suite.py --as gloo` lists them on another release.
GLOO_PASSES = """
test_Backend_enum_class test_DistributedDataParallelCPU test_DistributedDataParallelCPU_grad_is_view
test_DistributedDataParallel_requires_grad test_SyncBatchNorm_process_group test_accumulate_gradients_no_sync
test_accumulate_gradients_no_sync_allreduce_hook test_accumulate_gradients_no_sync_allreduce_with_then_hook
test_accumulate_gradients_no_sync_grad_is_view test_all_gather test_all_gather_coalesced_complex
test_all_gather_coalesced_full_group test_all_gather_coalesced_simple test_all_gather_coalesced_with_empty
test_all_gather_complex test_all_gather_full_group test_all_gather_object_default_pg test_all_gather_object_subgroup
test_all_reduce_coalesced_full_group_max test_all_reduce_coalesced_full_group_min
test_all_reduce_coalesced_full_group_product test_all_reduce_coalesced_full_group_sum test_all_reduce_coalesced_max
test_all_reduce_coalesced_max_complex_unsupported test_all_reduce_coalesced_min test_all_reduce_coalesced_product
test_all_reduce_coalesced_sum test_all_reduce_complex_unsupported_ops test_all_reduce_full_group_max
test_all_reduce_full_group_min test_all_reduce_full_group_product test_all_reduce_full_group_sum test_all_reduce_max
test_all_reduce_min test_all_reduce_product test_all_reduce_sum test_all_reduce_sum_async
test_all_reduce_sum_complex test_barrier test_barrier_full_group test_barrier_timeout_full_group
test_barrier_timeout_global test_batch_isend_irecv_gloo test_batch_isend_irecv_gloo_tags test_broadcast
test_broadcast_full_group test_ddp_create_graph test_ddp_logging_data_cpu test_destroy_full_group test_destroy_group
test_dump_DDP_relevant_env_vars test_gather test_gather_checks test_gather_full_group test_get_backend
test_get_future test_get_rank test_get_rank_size_full_group test_get_rank_size_group
test_grads_same_across_ranks_with_no_sync test_irecv test_isend test_isend_autograd_profiler
test_isend_torch_profiler test_monitored_barrier_gloo test_monitored_barrier_gloo_rank_0_timeout
test_monitored_barrier_gloo_subgroup test_reduce_full_group_max test_reduce_full_group_min
test_reduce_full_group_product test_reduce_full_group_sum test_reduce_max test_reduce_min test_reduce_product
test_reduce_sum test_reduce_sum_twice test_scatter test_scatter_checks test_scatter_complex test_scatter_full_group
test_scatter_object_list test_send_recv test_send_recv_any_source test_send_recv_any_source_autograd_profiler
test_send_recv_any_source_torch_profiler test_send_recv_autograd_profiler test_send_recv_torch_profiler
test_send_recv_with_tag test_send_recv_with_tag_autograd_profiler test_send_recv_with_tag_torch_profiler
test_sparse_all_reduce_sum test_static_graph_api_cpu
""".split()

# Gloo passes these on 2.4.1 only: newer releases skip them below world size 8 (their
# skip_if_small_worldsize), for Gloo as for shoal, so a skip is all they can be there.
GLOO_PASSES_ON_OLDER = """
test_all_gather_coalesced_group test_all_gather_group test_all_reduce_coalesced_group_max
test_all_reduce_coalesced_group_min test_all_reduce_coalesced_group_product test_all_reduce_coalesced_group_sum
test_all_reduce_group_max test_all_reduce_group_min test_all_reduce_group_product test_all_reduce_group_sum
test_barrier_group test_barrier_timeout_group test_broadcast_group test_gather_group test_gather_object
test_gather_object_subgroup test_monitored_barrier_failure_order test_monitored_barrier_wait_all_ranks
test_reduce_group_max test_reduce_group_min test_reduce_group_product test_reduce_group_sum test_scatter_group
""".split()

# Checks that the group's backend is named "gloo"; shoal's is named "shoal".
EXEMPT = {"test_get_backend"}

CHUNKS = 6


def run_suite(backend: str, tests: list[str], timeout: float) -> dict[str, str]:
    """Outcome per test: pass, fail, error, skip, or absent (not in this torch)."""
    cmd = [sys.executable, str(WORKERS / "torch_dist_suite.py"), "--as", backend, "--start", "fork", *tests]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    outcomes = dict(re.findall(r"^RESULT (\S+) (\S+)$", proc.stdout, re.M))
    if proc.returncode != 0 or not outcomes:
        pytest.fail(f"{' '.join(cmd[:5])} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return outcomes


@pytest.mark.timeout(900)
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_shoal_passes_what_gloo_passes(chunk: int) -> None:
    tests = [t for t in sorted(GLOO_PASSES + GLOO_PASSES_ON_OLDER) if t not in EXEMPT][chunk::CHUNKS]
    cmd = [sys.executable, str(WORKERS / "torch_dist_suite.py"), "--as", "shoal", "--start", "fork", *tests]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=840)
    outcomes = dict(re.findall(r"^RESULT (\S+) (\S+)$", proc.stdout, re.M))
    fine = {"pass", "absent"}  # absent: not in this torch
    bad = {t: o for t, o in outcomes.items() if o not in fine and not (o == "skip" and t in GLOO_PASSES_ON_OLDER)}
    assert len(outcomes) == len(tests) and not bad, f"{bad}\n{proc.stdout[-2000:]}\n{proc.stderr[-12000:]}"


@pytest.mark.timeout(1800)
@pytest.mark.skipif(
    "full" not in __import__("os").environ.get("SHOAL_TORCH_SUITE", ""), reason="SHOAL_TORCH_SUITE=full"
)
def test_whole_class_against_gloo() -> None:
    gloo = run_suite("gloo", [], 1700)
    shoal = run_suite("shoal", [], 1700)
    passed_by_gloo = {t for t, o in gloo.items() if o == "pass"}
    assert not [t for t in passed_by_gloo if shoal.get(t) != "pass" and t not in EXEMPT], (gloo, shoal)
