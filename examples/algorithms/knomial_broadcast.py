"""k-nomial tree broadcast, radix K: rank v (numbered from the root) gets the data from v less its lowest
nonzero base-K digit, then sends it on to v + d K^j for each lower digit j and 0 < d < K: ceil(log_K p) rounds."""

from shoal import algo

K = 3


def levels(p: int) -> int:
    n, span = 0, 1
    while span < p:
        n, span = n + 1, span * K
    return n


@algo.register("broadcast", "knomial", cost=algo.Cost(lambda p: (K - 1) * levels(p), lambda p: (K - 1) * levels(p)))
def knomial(b: algo.Builder) -> None:
    p, v, data, step = b.world, (b.rank - b.root) % b.world, algo.output(0, b.count), 1
    while step < p and v % (step * K) == 0:  # step: K ** (v's lowest nonzero digit), >= p at the root
        step *= K
    if v == 0:
        b.copy(algo.input(0, b.count), data)
    else:
        b.recv((v - (v // step) % K * step + b.root) % p, 0, data)
    s = step // K
    while s >= 1:
        for d in range(1, K):
            if v + d * s < p:
                b.send((v + d * s + b.root) % p, 0, data)
        s //= K
