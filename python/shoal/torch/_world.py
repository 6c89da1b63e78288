"""One shoal world per process, and the shoal communicators of torch's groups."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

import shoal


@dataclass
class _Runtime:
    """The backend's own child of this process's shoal world.

    ``root`` spans the world in torch's rank order; torch sub-groups are made
    from it by their members only (see ``_make_subgroup``)."""

    root: shoal.Group | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_runtime = _Runtime()


def _shoal_world(store: dist.Store, rank: int, size: int) -> shoal.Group:
    """The process's shoal world: the one ``shoal.init()`` made, else a new one met through torch's store."""
    if shoal.is_initialized():
        world = shoal.world()
        if world.size != size:
            raise RuntimeError(
                f"shoal was initialised with {world.size} ranks but torch's default group has {size}; "
                "call dist.init_process_group with the same world"
            )
        return world
    return shoal.init(rank=rank, world_size=size, addr=_store_address(store, rank, size))


def _store_address(store: dist.Store, rank: int, size: int) -> str:
    """``host:port`` where rank 0 will serve shoal's rendezvous store, agreed through torch's store.

    torch's own store may already listen on MASTER_PORT, so rank 0 picks a
    free port and publishes it."""
    if size == 1:
        return "127.0.0.1:1"  # a single process serves a private store; the address is unused
    key = "shoal/store_addr"
    if rank == 0:
        host = os.environ.get("MASTER_ADDR") or socket.gethostname()
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        store.set(key, f"{host}:{port}")
    addr: str = store.get(key).decode()
    return addr


def _make_root(store: dist.Store, rank: int, size: int) -> shoal.Group:
    """The backend's child of the world, ordered so that its rank r is torch's rank r."""
    world = _shoal_world(store, rank, size)
    store.set(f"shoal/world_rank/{rank}", str(world.rank))
    order = [int(store.get(f"shoal/world_rank/{r}")) for r in range(size)]
    root = world.new_group(order)
    assert root is not None and root.rank == rank
    return root


def _make_subgroup(group_name: str, group_rank: int, global_ranks: list[int]) -> shoal.Group:
    """The shoal communicator of a torch sub-group; called by its members only.

    torch calls the backend on the group's members only, so the group is made
    with a key (torch's name of the group), which the members agree on
    without the other ranks."""
    rt = _runtime
    assert rt.root is not None
    group = rt.root.new_group(list(global_ranks), key=f"torch:{group_name}")
    assert group is not None and group.rank == group_rank, (group, group_rank)
    return group


def communicator(opts: Any) -> shoal.Group:
    """The shoal communicator of the group torch is creating (``opts``: torch's
    ``_DistributedBackendOptions``); called on every member of the group."""
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    ranks = list(opts.global_ranks_in_group)
    rt = _runtime
    with rt.lock:
        if ranks and rt.root is None:
            raise RuntimeError("the shoal backend makes sub-groups of a default group that uses shoal as well")
        if not ranks:
            # the default group (torch passes no ranks): every rank of the job is here
            rt.root = _make_root(store, rank, size)
            return rt.root
        return _make_subgroup(str(getattr(opts, "group_id", "")), rank, ranks)
