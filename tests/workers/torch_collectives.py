"""Every c10d call of the shoal torch backend against a reference computed
locally from every rank's (deterministic) inputs. Launched by
tests/test_torch_backend.py through `shoal run`; prints "OK torch collectives"."""

from __future__ import annotations

import zlib

import torch
import torch.distributed as dist

import shoal.torch  # noqa: F401  (registers the backend)

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = {
    "sum": R.SUM,
    "prod": R.PRODUCT,
    "min": R.MIN,
    "max": R.MAX,
    "avg": R.AVG,
    "band": R.BAND,
    "bor": R.BOR,
    "bxor": R.BXOR,
}


def ops_for(dtype: torch.dtype) -> list[str]:
    if dtype == torch.bool:
        return ["sum", "prod", "min", "max", "band", "bor", "bxor"]
    if dtype in (torch.complex64, torch.complex128):
        return ["sum", "avg"]
    if dtype.is_floating_point:
        return ["sum", "prod", "min", "max", "avg"]
    return ["sum", "prod", "min", "max", "band", "bor", "bxor"]


def data(rank: int, shape: tuple[int, ...], dtype: torch.dtype, op: str = "sum", salt: str = "") -> torch.Tensor:
    """Small integers: every reduction is exact in every dtype."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{rank}/{shape}/{dtype}/{op}/{salt}".encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if op == "prod":
        choices = torch.tensor([1, 2] if dtype == torch.uint8 else [-1, 1, 2, 1])
        v = choices[torch.randint(0, len(choices), shape, generator=g)]
    elif dtype == torch.uint8:
        v = torch.randint(0, 7, shape, generator=g)
    else:
        v = torch.randint(-3, 4, shape, generator=g)
    if dtype in (torch.complex64, torch.complex128):
        w = torch.randint(-3, 4, shape, generator=g)
        return torch.complex(v.double(), w.double()).to(dtype)
    return v.to(dtype)


def reference(stack: torch.Tensor, op: str, dtype: torch.dtype) -> torch.Tensor:
    """Reduction over dim 0 of every rank's contribution, as torch computes it."""
    if dtype == torch.bool:
        i = stack.to(torch.int64)
        any_, all_ = i.amax(0), i.amin(0)
        out = {"sum": any_, "max": any_, "bor": any_, "prod": all_, "min": all_, "band": all_}.get(op)
        if op == "bxor":
            out = i.sum(0) % 2
        return out.bool()
    if dtype in (torch.complex64, torch.complex128):
        s = stack.to(torch.complex128).sum(0)
        return (s / stack.shape[0] if op == "avg" else s).to(dtype)
    wide = stack.to(torch.float64 if dtype.is_floating_point else torch.int64)
    if op in ("band", "bor", "bxor"):
        f = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
        out = wide[0]
        for t in wide[1:]:
            out = f(out, t)
        return out.to(dtype)
    red = {
        "sum": lambda x: x.sum(0),
        "prod": lambda x: x.prod(0),
        "min": lambda x: x.amin(0),
        "max": lambda x: x.amax(0),
        "avg": lambda x: x.sum(0) / x.shape[0],
    }[op]
    return red(wide).to(dtype)


def check(got: torch.Tensor, want: torch.Tensor, what: str, op: str = "") -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.dtype, want.shape)
    if op == "avg" and want.dtype in (torch.float16, torch.bfloat16):
        ok = torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}"


def noncontig(t: torch.Tensor) -> torch.Tensor:
    """A non-contiguous tensor with t's values (every other column of a wider buffer)."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    view = wide[..., ::2]
    view.copy_(t)
    assert not view.is_contiguous()
    return view


def expect_error(exc: type[BaseException], fragment: str, fn, *args, **kwargs) -> None:  # noqa: ANN001
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert fragment in str(e), f"{e!r} does not mention {fragment!r}"
        return
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


# ---------------------------------------------------------------------------


def check_reductions(r: int, n: int) -> None:
    shape = (3, 5)
    for dtype in FLOATS + INTS + [torch.bool, torch.complex64]:
        for op in ops_for(dtype):
            stack = torch.stack([data(q, shape, dtype, op) for q in range(n)])
            want = reference(stack, op, dtype)
            what = f"{dtype} {op}"
            x = data(r, shape, dtype, op)
            dist.all_reduce(x, op=OPS[op])
            check(x, want, f"all_reduce {what}", op)
            # asynchronous
            x = data(r, shape, dtype, op)
            w = dist.all_reduce(x, op=OPS[op], async_op=True)
            assert w.wait() is not False
            check(x, want, f"async all_reduce {what}", op)
            # non-contiguous
            x = noncontig(data(r, shape, dtype, op))
            dist.all_reduce(x, op=OPS[op])
            check(x.contiguous(), want, f"non-contiguous all_reduce {what}", op)
            # reduce to the last rank
            x = data(r, shape, dtype, op)
            dist.reduce(x, dst=n - 1, op=OPS[op])
            check(x, want if r == n - 1 else data(r, shape, dtype, op), f"reduce {what}", op)
            # reduce_scatter_tensor and reduce_scatter (list)
            big = torch.stack([data(q, (n, 4), dtype, op, "rs") for q in range(n)])
            want_rs = reference(big, op, dtype)[r]
            out = torch.empty(4, dtype=dtype)
            dist.reduce_scatter_tensor(out, data(r, (n, 4), dtype, op, "rs").reshape(-1), op=OPS[op])
            check(out, want_rs, f"reduce_scatter_tensor {what}", op)
            out = torch.empty(4, dtype=dtype)
            dist.reduce_scatter(out, list(data(r, (n, 4), dtype, op, "rs").unbind(0)), op=OPS[op])
            check(out, want_rs, f"reduce_scatter {what}", op)
    # int16 is reduced in a wider type
    for op in ("sum", "max", "bxor"):
        stack = torch.stack([data(q, (7,), torch.int16, op) for q in range(n)])
        x = data(r, (7,), torch.int16, op)
        dist.all_reduce(x, op=OPS[op])
        check(x, reference(stack, op, torch.int16), f"all_reduce int16 {op}")
    # coalesced (torch's front end wants one dtype; the process group takes mixed ones)
    xs = [data(r, (4,), torch.float32), data(r, (2, 3), torch.float32)]
    dist.all_reduce_coalesced(xs, op=R.MAX)
    for x in xs:
        shape = tuple(x.shape)
        check(x, reference(torch.stack([data(q, shape, torch.float32) for q in range(n)]), "max", x.dtype), "coalesced")
    dtypes = [torch.float32, torch.int64, torch.bfloat16]
    xs = [data(r, (4,), dtypes[0]), data(r, (2, 3), dtypes[1]), data(r, (5,), dtypes[2])]
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = R.SUM
    dist.distributed_c10d._get_default_group().allreduce_coalesced(xs, opts).wait()
    for x in xs:
        shape = tuple(x.shape)
        check(x, reference(torch.stack([data(q, shape, x.dtype) for q in range(n)]), "sum", x.dtype), "mixed coalesced")


def check_data_movement(r: int, n: int) -> None:
    for dtype in [torch.float32, torch.bfloat16, torch.bool, torch.int16, torch.complex64, torch.float64]:
        mine = data(r, (2, 3), dtype, salt="dm")
        everyone = [data(q, (2, 3), dtype, salt="dm") for q in range(n)]
        root = 1 % n
        # broadcast (contiguous and not)
        x = mine.clone()
        dist.broadcast(x, src=root)
        check(x, everyone[root], f"broadcast {dtype}")
        x = noncontig(mine)
        dist.broadcast(x, src=root)
        check(x.contiguous(), everyone[root], f"non-contiguous broadcast {dtype}")
        # all_gather (list, one output non-contiguous), all_gather_into_tensor
        outs = [torch.empty(2, 3, dtype=dtype) for _ in range(n)]
        outs[0] = noncontig(outs[0])
        dist.all_gather(outs, mine)
        for q in range(n):
            check(outs[q].contiguous(), everyone[q], f"all_gather {dtype} from {q}")
        out = torch.empty(n * 2, 3, dtype=dtype)
        dist.all_gather_into_tensor(out, mine)
        check(out, torch.cat(everyone), f"all_gather_into_tensor {dtype}")
        out = torch.empty(n * 2, 3, dtype=dtype)
        w = dist.all_gather_into_tensor(out, noncontig(mine), async_op=True)
        w.wait()
        check(out, torch.cat(everyone), f"async all_gather_into_tensor {dtype}")
        # gather and scatter at the root
        outs = [torch.empty(2, 3, dtype=dtype) for _ in range(n)] if r == root else None
        dist.gather(mine, outs, dst=root)
        if r == root:
            for q in range(n):
                check(outs[q], everyone[q], f"gather {dtype} from {q}")
        out = torch.empty(2, 3, dtype=dtype)
        parts = [data(root, (2, 3), dtype, salt=f"sc{q}") for q in range(n)] if r == root else None
        dist.scatter(out, parts, src=root)
        check(out, data(root, (2, 3), dtype, salt=f"sc{r}"), f"scatter {dtype}")
        if hasattr(dist, "gather_single"):
            out = torch.empty(n * 2, 3, dtype=dtype) if r == root else None
            dist.gather_single(mine, out, dst=root)
            if r == root:
                check(out, torch.cat(everyone), f"gather_single {dtype}")
    # object collectives ride on the tensor ones
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r, "name": "x" * r})
    assert objs == [{"rank": q, "name": "x" * q} for q in range(n)], objs
    lst = [r, "hello"] if r == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [0, "hello"], lst


def block(src: int, dst: int, rows: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """What rank src sends rank dst in the alltoall tests: rows x 3 values naming both."""
    base = torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3)
    return (base + 100 * src + 10 * dst).to(dtype)


def check_alltoall(r: int, n: int) -> None:
    # even all_to_all_single, zero-copy path
    inp = torch.cat([block(r, q, 2) for q in range(n)])
    out = torch.empty_like(inp)
    dist.all_to_all_single(out, inp)
    check(out, torch.cat([block(q, r, 2) for q in range(n)]), "all_to_all_single even")

    # uneven splits: rank s sends (s + d) % 3 rows to rank d
    def rows(s: int, d: int) -> int:
        return (s + d) % 3

    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        inp = torch.cat([block(r, q, rows(r, q), dtype) for q in range(n)])
        want = torch.cat([block(q, r, rows(q, r), dtype) for q in range(n)])
        out = torch.empty(want.shape, dtype=dtype)
        w = dist.all_to_all_single(
            out,
            inp,
            output_split_sizes=[rows(q, r) for q in range(n)],
            input_split_sizes=[rows(r, q) for q in range(n)],
            async_op=True,
        )
        w.wait()
        check(out, want, f"all_to_all_single uneven {dtype}")
    # list form with different sizes per pair, one non-contiguous output
    ins = [block(r, q, rows(r, q) + 1) for q in range(n)]
    outs = [torch.empty(rows(q, r) + 1, 3) for q in range(n)]
    outs[-1] = noncontig(outs[-1])
    dist.all_to_all(outs, ins)
    for q in range(n):
        check(outs[q].contiguous(), block(q, r, rows(q, r) + 1), f"all_to_all from {q}")


def check_point_to_point(r: int, n: int) -> None:
    """Each phase uses its own tag: see test_p2p_same_tag_different_shapes for why."""
    if n < 2:
        return
    nxt, prv = (r + 1) % n, (r - 1) % n
    # blocking send/recv around a ring: even ranks send first, odd ranks receive first
    x = torch.full((1000,), float(r))
    y = torch.empty(1000)
    if r % 2 == 0:
        dist.send(x, nxt)
        dist.recv(y, prv)
    else:
        dist.recv(y, prv)
        dist.send(x, nxt)
    check(y, torch.full((1000,), float(prv)), "send/recv")
    # irecv posted first, then isend, then wait for both: every rank alike
    big = torch.full((20_000,), r, dtype=torch.int64)  # large exchanges: test_p2p_large_exchange
    got = torch.empty_like(big)
    rw = dist.irecv(got, src=prv, tag=3)
    sw = dist.isend(big, dst=nxt, tag=3)
    sw.wait()
    rw.wait()
    check(got, torch.full((20_000,), prv, dtype=torch.int64), "isend/irecv")
    # several receives from one peer complete in issue order even if waited out of order
    a, b = torch.empty(3), torch.empty(3)
    wa, wb = dist.irecv(a, src=prv, tag=5), dist.irecv(b, src=prv, tag=5)
    dist.send(torch.full((3,), 1.0 + r), nxt, tag=5)
    dist.send(torch.full((3,), 2.0 + r), nxt, tag=5)
    wb.wait()
    assert wa.is_completed()
    wa.wait()
    check(a, torch.full((3,), 1.0 + prv), "first irecv")
    check(b, torch.full((3,), 2.0 + prv), "second irecv")
    # batch_isend_irecv
    out = torch.empty(4, dtype=torch.bfloat16)
    ops = [
        dist.P2POp(dist.isend, torch.full((4,), float(r), dtype=torch.bfloat16), nxt, tag=7),
        dist.P2POp(dist.irecv, out, prv, tag=7),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(out, torch.full((4,), float(prv), dtype=torch.bfloat16), "batch_isend_irecv")
    # non-contiguous receive buffer
    nc = noncontig(torch.empty(2, 4))
    if r == 0:
        dist.send(torch.arange(8.0).reshape(2, 4), 1, tag=9)
    elif r == 1:
        dist.recv(nc, 0, tag=9)
        check(nc.contiguous(), torch.arange(8.0).reshape(2, 4), "non-contiguous recv")
    dist.barrier()


def check_groups(r: int, n: int) -> None:
    """Sub-groups, including ones whose members made different numbers of groups before."""
    w = dist.get_world_size()
    groups = [list(range(n)), [0, 1], [0, 1], [1, 2] if n > 2 else [1], [n - 1, 0] if n > 2 else [0]]
    made = [dist.new_group(ranks) for ranks in groups]
    for ranks, g in zip(groups, made):
        if r not in ranks:
            continue
        assert dist.get_world_size(g) == len(ranks)
        x = torch.tensor([float(r + 1)])
        dist.all_reduce(x, group=g)
        check(x, torch.tensor([float(sum(q + 1 for q in ranks))]), f"all_reduce on group {ranks}")
        b = torch.tensor([r])
        dist.broadcast(b, src=ranks[-1], group=g)
        check(b, torch.tensor([ranks[-1]]), f"broadcast on group {ranks}")
        outs = [torch.empty(1, dtype=torch.int64) for _ in ranks]
        dist.all_gather(outs, torch.tensor([r]), group=g)
        assert [int(o) for o in outs] == sorted(ranks) or [int(o) for o in outs] == ranks, outs
    # groups made by new_subgroups: each rank in one subgroup
    sub, _ = dist.new_subgroups(group_size=1)
    x = torch.tensor([float(r)])
    dist.all_reduce(x, group=sub)
    check(x, torch.tensor([float(r)]), "subgroup of one")
    assert w == n


def check_coalescing(r: int, n: int) -> None:
    from torch.distributed.distributed_c10d import _coalescing_manager

    xs = [torch.full((3,), float(r + i)) for i in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x)
    cm.wait()
    for i, x in enumerate(xs):
        check(x, torch.full((3,), float(sum(q + i for q in range(n)))), "coalesced all_reduce")
    outs = [torch.empty(2 * n) for _ in range(2)]
    with _coalescing_manager():
        for i, o in enumerate(outs):
            dist.all_gather_into_tensor(o, torch.full((2,), float(r * 10 + i)))
    for i, o in enumerate(outs):
        want = torch.cat([torch.full((2,), float(q * 10 + i)) for q in range(n)])
        check(o, want, "coalesced all_gather_into_tensor")


def check_functional_collectives(r: int, n: int) -> None:
    """torch's functional collectives (DTensor's, FSDP2's) issue the call from
    C++ and keep its work there until the result is used: the work must stay
    waitable after Python has let go of it."""
    import gc

    import torch.distributed._functional_collectives as funcol

    pending = [funcol.all_reduce(torch.full((5,), float(r + i)), "sum", dist.group.WORLD) for i in range(3)]
    gathered = funcol.all_gather_tensor(torch.full((2,), float(r)), 0, dist.group.WORLD)
    gc.collect()
    for i in reversed(range(3)):
        check(pending[i] * 1, torch.full((5,), float(sum(q + i for q in range(n)))), f"functional all_reduce #{i}")
    check(gathered * 1, torch.cat([torch.full((2,), float(q)) for q in range(n)]), "functional all_gather")


def check_uneven_gather_and_scatter(r: int, n: int) -> None:
    """all_gather and reduce_scatter with a tensor size per rank (run with per-rank counts)."""

    def size(q: int) -> int:
        return (q * 2 + 1) % 4  # 1, 3, 0, 2, ...: zeros too

    for dtype in (torch.float32, torch.int16, torch.complex64, torch.bool):
        outs = [torch.empty(size(q), dtype=dtype) for q in range(n)]
        dist.all_gather(outs, data(r, (size(r),), dtype, salt="ug"))
        for q in range(n):
            check(outs[q], data(q, (size(q),), dtype, salt="ug"), f"uneven all_gather {dtype} from {q}")
    for dtype in (torch.float32, torch.int16, torch.complex64):
        ins = [torch.full((size(q),), r + 1, dtype=dtype) for q in range(n)]
        out = torch.empty(size(r), dtype=dtype)
        dist.reduce_scatter(out, ins)
        check(out, torch.full((size(r),), sum(q + 1 for q in range(n)), dtype=dtype), f"uneven reduce_scatter {dtype}")


def check_errors(r: int, n: int) -> None:
    x = torch.ones(4)
    # ReduceOp.PREMUL_SUM is not callable on torch 2.4; _make_nccl_premul_sum builds the op on every release
    premul_sum = dist._make_nccl_premul_sum(2.0)
    expect_error(ValueError, "PREMUL_SUM", dist.all_reduce, x, op=premul_sum)
    expect_error(TypeError, "AVG needs floating point", dist.all_reduce, torch.ones(4, dtype=torch.int32), op=R.AVG)
    expect_error(TypeError, "BAND needs integer", dist.all_reduce, x, op=R.BAND)
    # the backend is still healthy
    dist.all_reduce(x)
    check(x, torch.full((4,), float(n)), "all_reduce after errors")


def check_barrier_and_async_order(r: int, n: int) -> None:
    xs = [torch.full((50_000,), float(r + i)) for i in range(6)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    dist.barrier()
    for i, (w, x) in enumerate(zip(works, xs)):
        w.wait()
        assert w.is_completed()
        check(x, torch.full((50_000,), float(sum(q + i for q in range(n)))), f"async #{i}")
    fut = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    assert torch.equal(fut.wait()[0], torch.full((2,), float(n)))
    w = dist.barrier(async_op=True)
    w.wait()


def check_no_work_left_held() -> None:
    """Where torch drops the Python object of a work held by C++ (torch 2.4),
    the backend holds its works until they are consumed: every work here was
    waited for (by this script or by torch), so none may stay held."""
    from shoal.torch import _work

    assert _work._keeper.held() == 0, f"{_work._keeper.held()} works still held"


def main() -> None:
    dist.init_process_group("shoal")
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "shoal"
    check_reductions(r, n)
    check_data_movement(r, n)
    check_alltoall(r, n)
    check_uneven_gather_and_scatter(r, n)
    check_point_to_point(r, n)
    check_groups(r, n)
    check_coalescing(r, n)
    check_functional_collectives(r, n)
    check_errors(r, n)
    check_barrier_and_async_order(r, n)
    check_no_work_left_held()
    dist.destroy_process_group()
    print("OK torch collectives", flush=True)


if __name__ == "__main__":
    main()
