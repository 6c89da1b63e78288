"""Ring allreduce (Patarasuk and Yuan): a reduce-scatter, then an allgather,
around the ring, one block per round; each rank sends 2 (p-1)/p of the data."""

from shoal import algo

cost = algo.Cost(messages=lambda p: 2 * (p - 1), bytes=lambda p: 2 * (p - 1) / p, reduced=lambda p: (p - 1) / p)


@algo.register("allreduce", "py_ring", cost=cost)
def ring(b: algo.Builder) -> None:
    r, p = b.rank, b.world
    data = algo.output(0, b.count)
    b.copy(algo.input(0, b.count), data)
    blocks = data.split(p)
    for s in range(p - 1):  # reduce-scatter: block r ends up complete on rank r
        b.send((r + 1) % p, s, blocks[(r - s - 1) % p])
        b.recv_reduce((r - 1) % p, s, blocks[(r - s - 2) % p])
    for s in range(p - 1):  # allgather: pass the complete blocks on
        b.send((r + 1) % p, p + s, blocks[(r - s) % p])
        b.recv((r - 1) % p, p + s, blocks[(r - s - 1) % p])
