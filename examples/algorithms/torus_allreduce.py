"""2D (torus) allreduce on a rows x cols grid: ring reduce-scatter along each row, ring allreduce of each rank's
block down its column, ring allgather along the row: 2 (rows + cols - 2) rounds instead of 2 (p - 1)."""

from shoal import algo


def ring(b: algo.Builder, members: list[int], pos: int, blocks: list[algo.Region], round0: int, reduce: bool) -> None:
    k = len(members)  # reduce-scatter (block pos ends complete here) or allgather (block pos starts valid)
    for s in range(k - 1):
        out, into = ((pos - s - 1) % k, (pos - s - 2) % k) if reduce else ((pos - s) % k, (pos - s - 1) % k)
        b.send(members[(pos + 1) % k], round0 + s, blocks[out])
        (b.recv_reduce if reduce else b.recv)(members[(pos - 1) % k], round0 + s, blocks[into])


def grid(p: int) -> tuple[int, int]:
    cols = max(c for c in range(1, int(p**0.5) + 1) if p % c == 0)
    return p // cols, cols


@algo.register("allreduce", "torus", cost=algo.Cost(lambda p: 2 * (sum(grid(p)) - 2), lambda p: 2 * (p - 1) / p))
def torus(b: algo.Builder) -> None:
    (rows, cols), data = grid(b.world), algo.output(0, b.count)
    row, col = divmod(b.rank, cols)
    b.copy(algo.input(0, b.count), data)
    along_row, down_col = [row * cols + c for c in range(cols)], [x * cols + col for x in range(rows)]
    blocks = data.split(cols)
    ring(b, along_row, col, blocks, 0, reduce=True)
    ring(b, down_col, row, blocks[col].split(rows), b.world, reduce=True)
    ring(b, down_col, row, blocks[col].split(rows), 2 * b.world, reduce=False)
    ring(b, along_row, col, blocks, 3 * b.world, reduce=False)
