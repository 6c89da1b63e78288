"""Every list-form c10d call of the shoal backend against Gloo's output for the
same inputs: the default group is shoal, a second group over the same ranks
is Gloo, and each call runs on both with rank-dependent inputs, with input
counts (list lengths and element counts) of 1, 2, the world size and the
world size + 1, so that a list read in the wrong layout ([rank][input] for
[input][rank]) cannot go unnoticed when the two lengths are equal.
Launched by tests/test_torch_backend.py; prints "OK torch list forms"."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

import shoal.torch  # noqa: F401  (registers the backend)


def value(rank: int, i: int, numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Distinct per (rank, input, element): a transposed result cannot match."""
    return (rank * 1000 + i * 100 + torch.arange(numel)).to(dtype)


def same(a: Any, b: Any, what: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype, (what, a, b)
        assert torch.equal(a, b), f"{what}: shoal {a.flatten()[:12].tolist()} gloo {b.flatten()[:12].tolist()}"
        return
    assert len(a) == len(b), (what, len(a), len(b))
    for k, (x, y) in enumerate(zip(a, b)):
        same(x, y, f"{what}[{k}]")


def both(
    what: str, run: Callable[[Any], Any], shoal_group: Any, gloo_group: Any, reference: Callable[[], Any] | None = None
) -> None:
    """`run(group)` builds its own buffers and returns the outputs to compare.
    Where this torch's Gloo lacks the call (2.4 has no reduce_scatter), with
    ``reference``, the outputs computed locally instead."""
    mine = run(shoal_group)
    try:
        theirs = run(gloo_group)
    except RuntimeError as e:
        if reference is None or "does not support" not in str(e):
            raise
        theirs = reference()
    same(mine, theirs, what)


def main() -> None:
    dist.init_process_group("shoal")
    r, n = dist.get_rank(), dist.get_world_size()
    sg = dist.group.WORLD
    gg = dist.new_group(list(range(n)), backend="gloo")
    counts = sorted({1, 2, n, n + 1})

    for k in counts:
        # all_gather_coalesced: output_tensor_lists[rank][input], k inputs of different sizes
        def agc(g: Any, k: int = k) -> Any:
            ins = [value(r, i, i + 1) for i in range(k)]
            outs = [[torch.full((i + 1,), -1.0) for i in range(k)] for _ in range(n)]
            dist.all_gather_coalesced(outs, ins, group=g)
            return outs

        both(f"all_gather_coalesced {k} inputs", agc, sg, gg)

        # all_gather_coalesced, asynchronous
        def agc_async(g: Any, k: int = k) -> Any:
            ins = [value(r, i, 2) for i in range(k)]
            outs = [[torch.zeros(2) for _ in range(k)] for _ in range(n)]
            dist.all_gather_coalesced(outs, ins, group=g, async_op=True).wait()
            return outs

        both(f"async all_gather_coalesced {k} inputs", agc_async, sg, gg)

        # the single-input list forms with k elements per tensor
        def ag(g: Any, k: int = k) -> Any:
            outs = [torch.zeros(k) for _ in range(n)]
            dist.all_gather(outs, value(r, 0, k), group=g)
            return outs

        both(f"all_gather {k} elements", ag, sg, gg)

        def gather(g: Any, k: int = k) -> Any:
            outs = [torch.zeros(k) for _ in range(n)] if r == n - 1 else None
            dist.gather(value(r, 0, k), outs, dst=n - 1, group=g)
            return outs or []

        both(f"gather {k} elements", gather, sg, gg)

        def scatter(g: Any, k: int = k) -> Any:
            out = torch.zeros(k)
            ins = [value(r, q, k) for q in range(n)] if r == 1 else None
            dist.scatter(out, ins, src=1, group=g)
            return [out]

        both(f"scatter {k} elements", scatter, sg, gg)

        def reduce_scatter(g: Any, k: int = k) -> Any:
            out = torch.zeros(k)
            dist.reduce_scatter(out, [value(r, q, k) for q in range(n)], group=g)
            return [out]

        def rs_reference(k: int = k) -> Any:
            return [sum(value(q, r, k) for q in range(n))]

        both(f"reduce_scatter {k} elements", reduce_scatter, sg, gg, rs_reference)

        def ag_base(g: Any, k: int = k) -> Any:
            out = torch.zeros(n * k)
            dist.all_gather_into_tensor(out, value(r, 0, k), group=g)
            return [out]

        both(f"all_gather_into_tensor {k} elements", ag_base, sg, gg)

        def rs_base(g: Any, k: int = k) -> Any:
            out = torch.zeros(k)
            dist.reduce_scatter_tensor(out, value(r, 0, n * k), group=g)
            return [out]

        def rs_base_reference(k: int = k) -> Any:
            return [sum(value(q, 0, n * k) for q in range(n))[r * k : (r + 1) * k]]

        both(f"reduce_scatter_tensor {k} elements", rs_base, sg, gg, rs_base_reference)

        def a2a_single(g: Any, k: int = k) -> Any:
            out = torch.zeros(n * k)
            dist.all_to_all_single(out, value(r, 0, n * k), group=g)
            return [out]

        both(f"all_to_all_single {k} elements", a2a_single, sg, gg)

        def a2a_single_split(g: Any, k: int = k) -> Any:
            # rank r sends (q + 1) * k rows... to rank q: row counts differ per pair
            send = [(q + r + 1) for q in range(n)]
            recv = [(r + q + 1) for q in range(n)]
            inp = value(r, 0, sum(send) * k).reshape(sum(send), k)
            out = torch.zeros(sum(recv), k)
            dist.all_to_all_single(out, inp, recv, send, group=g)
            return [out]

        both(f"all_to_all_single split {k} columns", a2a_single_split, sg, gg)

        # k tensors coalesced
        def ar_coalesced(g: Any, k: int = k) -> Any:
            ts = [value(r, i, i + 2) for i in range(k)]
            dist.all_reduce_coalesced(ts, group=g)
            return ts

        both(f"all_reduce_coalesced {k} tensors", ar_coalesced, sg, gg)

        def manager(g: Any, k: int = k) -> Any:
            ins = [value(r, i, 3) for i in range(k)]
            outs = [torch.zeros(3 * n) for _ in range(k)]
            with dist._coalescing_manager(group=g, async_ops=True) as cm:
                for o, i in zip(outs, ins):
                    dist.all_gather_into_tensor(o, i, group=g)
            cm.wait()
            return outs

        both(f"coalesced all_gather_into_tensor {k} tensors", manager, sg, gg)

        def objects(g: Any, k: int = k) -> Any:
            got: list[Any] = [None] * n
            dist.all_gather_object(got, {"rank": r, "k": list(range(k))}, group=g)
            return [torch.tensor([o["rank"], len(o["k"])]) for o in got]

        both(f"all_gather_object {k}", objects, sg, gg)

    # all_to_all (list): Gloo has no list alltoall on every release; then a local reference
    for k in counts:
        out = [torch.zeros(k) for _ in range(n)]
        dist.all_to_all(out, [value(r, q, k) for q in range(n)])
        same(out, [value(q, r, k) for q in range(n)], f"all_to_all {k} elements")

    dist.barrier()
    print(f"rank {r}: OK torch list forms", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
