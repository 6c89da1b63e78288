"""Communication patterns algorithms share, as in the Rust ``phases`` module:
ring reduce-scatter and allgather (over the group or any ring of its ranks)
and binomial-tree broadcast and reduce. Each takes the first message round it
may use and returns the first round after the ones it used, so phases chain."""

from __future__ import annotations

from collections.abc import Sequence

from shoal.algo._builder import Builder, Region


def _ring(b: Builder, members: Sequence[int] | None) -> tuple[Sequence[int], int]:
    """The ring (ranks in ring order) and this rank's position in it."""
    ring = range(b.world) if members is None else members
    if b.rank not in ring:
        raise ValueError(f"rank {b.rank} is not in the ring {list(ring)}")
    return ring, list(ring).index(b.rank)


def ring_reduce_scatter(
    b: Builder, blocks: Sequence[Region], round0: int = 0, members: Sequence[int] | None = None
) -> int:
    """Before: every block holds this rank's contribution. After: block ``pos``
    (this rank's position in the ring) holds the reduction over the ring."""
    ring, pos = _ring(b, members)
    k = len(ring)
    for s in range(k - 1):
        b.send(ring[(pos + 1) % k], round0 + s, blocks[(pos - s - 1) % k])
        b.recv_reduce(ring[(pos - 1) % k], round0 + s, blocks[(pos - s - 2) % k])
    return round0 + max(k - 1, 0)


def ring_allgather(b: Builder, blocks: Sequence[Region], round0: int = 0, members: Sequence[int] | None = None) -> int:
    """Before: block ``pos`` is valid. After: every block is."""
    ring, pos = _ring(b, members)
    k = len(ring)
    for s in range(k - 1):
        b.send(ring[(pos + 1) % k], round0 + s, blocks[(pos - s) % k])
        b.recv(ring[(pos - 1) % k], round0 + s, blocks[(pos - s - 1) % k])
    return round0 + max(k - 1, 0)


def _tree(b: Builder, root: int) -> tuple[int, int, list[tuple[int, int]]]:
    """Binomial tree around ``root``: this rank's virtual rank v (root = 0), the
    lowest set bit of v (past the tree for the root), and its children as
    (rank, round offset), nearest first. Child v + 2^k uses round offset k."""
    p = b.world
    v = (b.rank - root) % p
    low = v & -v if v else 1 << max(p - 1, 0).bit_length()
    children = [((v + (1 << k) + root) % p, k) for k in range(low.bit_length() - 1) if v + (1 << k) < p]
    return v, low, children


def tree_broadcast(b: Builder, root: int, data: Region, round0: int = 0) -> int:
    """``data`` (valid at ``root``) to every rank; farthest child first."""
    v, low, children = _tree(b, root)
    if v:
        b.recv((v - low + root) % b.world, round0 + low.bit_length() - 1, data)
    for child, k in reversed(children):
        b.send(child, round0 + k, data)
    return round0 + max(b.world - 1, 0).bit_length()


def tree_reduce(b: Builder, root: int, acc: Region, round0: int = 0) -> int:
    """The reduction of every rank's ``acc`` into ``root``'s; nearest child first."""
    v, low, children = _tree(b, root)
    for child, k in children:
        b.recv_reduce(child, round0 + k, acc)
    if v:
        b.send((v - low + root) % b.world, round0 + low.bit_length() - 1, acc)
    return round0 + max(b.world - 1, 0).bit_length()
