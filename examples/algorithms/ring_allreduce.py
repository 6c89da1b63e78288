"""Ring allreduce (Patarasuk and Yuan): a reduce-scatter then an allgather
around the ring, one block per round; each rank sends 2 (p-1)/p of the data.

    shoal run -n 4 python examples/algorithms/ring_allreduce.py"""

from shoal import algo


@algo.register("allreduce", "py_ring", cost=algo.Cost(lambda p: 2 * (p - 1), lambda p: 2 * (p - 1) / p))
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


if __name__ == "__main__":
    import numpy as np

    import shoal

    algo.verify(ring, worlds=[1, 2, 3, 4, 5], counts=[0, 1, 7, 100])
    g = shoal.init()
    x = np.arange(10, dtype=np.float32) + g.rank
    g.allreduce(x, algorithm="py_ring")
    assert np.allclose(x, np.arange(10) * g.size + sum(range(g.size))), x
    print(f"rank {g.rank}: py_ring allreduce ok")
