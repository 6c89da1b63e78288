"""2D (torus) allreduce on a rows x cols grid: ring reduce-scatter along each row, ring allreduce of each rank's
block down its column, ring allgather along the row: 2 (rows + cols - 2) rounds instead of 2 (p - 1)."""

from shoal import algo
from shoal.algo import phases


def grid(p: int) -> tuple[int, int]:
    cols = max(c for c in range(1, int(p**0.5) + 1) if p % c == 0)
    return p // cols, cols


@algo.register("allreduce", "torus", cost=algo.Cost(lambda p: 2 * (sum(grid(p)) - 2), lambda p: 2 * (p - 1) / p))
def torus(b: algo.Builder) -> None:
    (rows, cols), data = grid(b.world), algo.output(0, b.count)
    row, col = divmod(b.rank, cols)
    b.copy(algo.input(0, b.count), data)
    along_row, down_col = [row * cols + c for c in range(cols)], [x * cols + col for x in range(rows)]
    blocks = data.split(cols)  # block c ends complete on column c of the row...
    mine = blocks[col].split(rows)  # ...and its pieces complete down the column
    n = phases.ring_reduce_scatter(b, blocks, 0, along_row)
    n = phases.ring_reduce_scatter(b, mine, n, down_col)
    n = phases.ring_allgather(b, mine, n, down_col)
    phases.ring_allgather(b, blocks, n, along_row)
