"""A bidirectional ring allreduce, written only here (not among the examples):
half the data goes around the ring one way, half the other way, so both
directions of every link carry data. Loaded through SHOAL_ALGORITHMS by
tests/test_sim_algorithms.py's job and simulated from the same definition."""

from shoal import algo


@algo.register("allreduce", "bidir_ring")
def bidir_ring(b: algo.Builder) -> None:
    r, p = b.rank, b.world
    data = algo.output(0, b.count)
    b.copy(algo.input(0, b.count), data)
    half = b.count // 2
    # Rounds 0..2p go clockwise, 2p..4p counter-clockwise.
    for d, part, first in ((1, data.sub(0, half), 0), (-1, data.sub(half, b.count - half), 2 * p)):
        blocks = part.split(p)
        nxt, prv = (r + d) % p, (r - d) % p
        for s in range(p - 1):  # reduce-scatter: block r ends up complete on rank r
            b.send(nxt, first + s, blocks[(r - d * (s + 1)) % p])
            b.recv_reduce(prv, first + s, blocks[(r - d * (s + 2)) % p])
        for s in range(p - 1):  # allgather: pass the complete blocks on
            b.send(nxt, first + p + s, blocks[(r - d * s) % p])
            b.recv(prv, first + p + s, blocks[(r - d * (s + 1)) % p])
