"""The ``shoal._shoal`` extension module (crates/shoal-py): communicators,
work handles, errors and plan inspection. ``shoal`` and ``shoal.Group`` wrap
it with argument checks; use those. Buffers are buffer-protocol objects, held
(not copied) until the call using them is done."""

from collections.abc import Callable
from typing import Any, final

from typing_extensions import Self

from shoal._types import Buffer, CollectiveName, DTypeName, ReduceOpName

class ShoalError(RuntimeError):
    """A collective or the runtime failed."""

class PeerDiedError(ShoalError):
    """A peer rank died."""

class MismatchError(ShoalError):
    """Ranks called mismatched collectives."""

class AbortedError(ShoalError):
    """A peer rank aborted the job."""

class ShoalTimeoutError(TimeoutError):
    """Nothing moved for SHOAL_TIMEOUT seconds."""

@final
class Work:
    """A started asynchronous collective."""

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the collective is done (or ``timeout`` seconds pass:
        the call then goes on, owning its buffers); raises its error if it failed."""
    def is_completed(self) -> bool: ...

@final
class Call:
    """One collective call, parsed and checked once: what ``Communicator.collective`` runs."""

    def __init__(
        self,
        collective: CollectiveName,
        *,
        count: int = 0,
        dtype: DTypeName = "uint8",
        op: ReduceOpName = "sum",
        root: int = 0,
        algorithm: str | None = None,
        counts: list[int] | None = None,
    ) -> None: ...
    @property
    def collective(self) -> CollectiveName: ...
    @property
    def count(self) -> int: ...
    @property
    def counts(self) -> list[int] | None:
        """Per-rank element counts (allgatherv, reduce_scatter with counts), or the
        world x world matrix of an alltoallv, row by sender."""
    @property
    def dtype(self) -> DTypeName: ...
    @property
    def op(self) -> ReduceOpName: ...
    @property
    def root(self) -> int: ...
    @property
    def algorithm(self) -> str | None: ...

@final
class Communicator:
    """A group of ranks that run collectives together."""

    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def members(self) -> list[int]:
        """Global ranks of the members in group order."""
    @property
    def finalized(self) -> bool:
        """Whether this communicator's world was finalized (using it raises)."""
    @property
    def local_ranks(self) -> list[int]:
        """Global ranks that share this process's host (shared memory peers)."""
    @property
    def shared_memory_algorithms(self) -> bool:
        """Whether the ``shm_*`` algorithms (they read peers' memory) can run."""
    @property
    def timeout(self) -> float:
        """Seconds a call may wait without progress (``SHOAL_TIMEOUT`` unless set)."""
    @timeout.setter
    def timeout(self, seconds: float) -> None: ...
    @property
    def cost_model(self) -> dict[str, float]:
        """The cost model in use: alpha, beta, gamma, alpha_local, beta_local, beta_read."""
    @property
    def plans_cached(self) -> int:
        """How many compiled plans this process caches (all communicators)."""
    @property
    def plan_cache_capacity(self) -> int:
        """The most plans the cache keeps (``SHOAL_PLAN_CACHE``)."""
    def collective(
        self, call: Call, input: Buffer | None, output: Buffer | None, async_op: bool = False
    ) -> Work | None:
        """Runs the collective ``call`` describes over C-contiguous buffers (the output
        writable); returns a Work if ``async_op``, else None once it is done."""
    def run_in_place(self, collective: str, x: object, op: object, root: object, algorithm: object) -> bool:
        """Runs allreduce, broadcast or reduce in place on one buffer whose format names
        its element type; False, having run nothing, where the buffer or an argument
        is not of that plain kind (the full path names the problem)."""
    def send(self, peer: int, tag: int, dtype: DTypeName, data: Buffer) -> None:
        """Sends the buffer (of ``dtype`` elements) to group rank ``peer``."""
    def recv(self, peer: int, tag: int, dtype: DTypeName, data: Buffer) -> None:
        """Receives from group rank ``peer`` into the buffer (of ``dtype`` elements)."""
    def recv_any(self, tag: int, dtype: DTypeName, data: Buffer) -> int:
        """Receives the first message with ``tag`` from any group rank; returns that rank."""
    def new_group(self, ranks: list[int], key: str | None = None) -> Communicator | None:
        """A sub-communicator. Without ``key`` every member of this one calls it alike
        (None for non-members); with ``key`` only the members call it, with the same key."""
    def synchronize(self) -> None:
        """Waits for every asynchronous collective issued so far."""
    def finalize(self) -> None:
        """Ends every communicator of this one's world, sub-groups too; using one afterwards raises."""
    def choose_algorithm(
        self,
        collective: CollectiveName,
        count: int,
        dtype: DTypeName,
        root: int = 0,
        algorithm: str | None = None,
    ) -> str:
        """Which algorithm the selector would run for a call (for inspection)."""
    def plan_steps(
        self,
        collective: CollectiveName,
        count: int,
        dtype: DTypeName,
        root: int = 0,
        algorithm: str | None = None,
    ) -> int:
        """How many steps this rank's plan of a call has (a trace has one event per executed step)."""

class GroupCalls:
    """The native base of ``shoal.Group``: its communicator and in-place
    collectives (declared on ``Group``, see there)."""

    _comm: Communicator | None
    def __new__(cls, comm: Communicator | None = None) -> Self: ...

_ShapeTuple = tuple[str, int, int, int, int, int, list[int] | None]
_RegionTuple = tuple[str, int, int]
_OpTuple = tuple[str, int, int, _RegionTuple | None, _RegionTuple | None]

@final
class CallPlans:
    """The plans of every rank of one call (``shoal.algo.Plan``)."""

    @staticmethod
    def from_json(text: str) -> CallPlans:
        """Reads a plan document (docs/algorithms.md); ValueError naming the field that is wrong."""
    def to_json(self) -> str: ...
    @property
    def shape(self) -> _ShapeTuple:
        """(collective, world, count, root, chunk, ranks_per_host, counts)."""
    @property
    def algorithm(self) -> str | None:
        """``collective/name`` of the algorithm that made the plans, if known."""
    def steps(self, rank: int) -> list[tuple[str, list[int]]]:
        """The steps of ``rank``: (what it does, the steps it waits on)."""
    def scratch(self, rank: int) -> int:
        """Scratch elements the plan of ``rank`` uses."""
    def origin(self, rank: int, step: int) -> int | None:
        """For plans lowered from Python: the builder operation that made the step."""
    def verify(self) -> tuple[str, int | None, int | None] | None:
        """None when the plans are right; else (what is wrong, rank, step to blame)."""

def builtin_plans(shape: _ShapeTuple, algorithm: str) -> CallPlans:
    """The plans a built-in algorithm makes for every rank of a call."""

def lower_plans(shape: _ShapeTuple, ranks: list[tuple[int, list[_OpTuple]]], algorithm: str | None = None) -> CallPlans:
    """Lowers the operations recorded for every rank, ``(scratch elements, operations)``, into plans."""

def register_algorithm(collective: CollectiveName, name: str, source: Any) -> None:
    """Registers algorithm ``name`` of ``collective``; ``source.plan(collective, name, shape, rank)``
    and ``source.cost(collective, name, world)`` supply its plans and cost on the calling thread."""

def init(rank: int | None = None, world_size: int | None = None, addr: str | None = None) -> Communicator:
    """Joins the job described by the arguments or the environment and returns the world communicator."""

def dtypes() -> list[tuple[str, int, str | None]]:
    """The element types, in the core's order: (name, bytes per element, numpy dtype name or None)."""

def algorithms(collective: CollectiveName) -> list[str]:
    """Names of the algorithms of a collective: the built-in ones, then those registered from Python."""

def switch_main(argv: list[str]) -> int:
    """Runs the aggregation switch with command-line ``argv`` until SIGINT or SIGTERM; returns the exit code."""

def config_variables() -> list[dict[str, str]]:
    """Every SHOAL_* variable: dicts with name, default, meaning and read_in."""

def sim_plan_json(
    collective: str,
    algo: str,
    ranks: int,
    size: str,
    topology: str,
    link: str | None = None,
    latency: str | None = None,
    buffer: str | None = None,
    engine: str = "packet",
    ranks_per_host: int = 1,
    seed: int = 0,
    host_overhead: str | None = None,
    plans: CallPlans | None = None,
    tier_rates: str | None = None,
) -> str:
    """Simulates one collective call (shoal sim plan) of a built-in or Python-registered algorithm, or of
    a plan document (``plans``: replaces collective, algo, ranks and size); the report as a JSON object
    string; ValueError on bad input."""

def sim_run_json(
    overrides: list[tuple[str, str]],
    progress: Callable[[float], object] | None = None,
    out: str | None = None,
    config: str | None = None,
) -> tuple[str, list[str]]:
    """Runs a scenario (shoal sim run): the TOML file ``config`` if given, read and parsed in Rust, with the
    (dotted key, value) ``overrides`` set over it; the report as a JSON object string and the run's warnings
    (degenerate runs); with ``out``, writes the run's records there (flows.csv, iterations.csv, links.csv).
    ValueError names the file, line and key of a bad key or value."""

def sim_panama_fig8_json(pairs: list[tuple[str, str]], variant: str, load: float, out: str | None = None) -> str:
    """One point of PANAMA's Fig. 8 (variant at total load); JSON object string; ValueError on bad input;
    with ``out``, writes the point's records there (flows.csv, iterations.csv, links.csv)."""

def sim_panama_fig10_json(congestion_control: bool) -> str:
    """PANAMA's Fig. 10 rate time series on one shared link; JSON object string."""

def detect_launcher() -> dict[str, Any]:
    """What the environment says about this process (launcher, rank, world, store); ValueError if inconsistent."""

def config_error() -> str | None:
    """Why init would refuse the current SHOAL_* values, or None."""

def tune_tables(path: str | None = None) -> dict[str, Any]:
    """The tuning tables the selector consults (path's, default SHOAL_TUNE_FILE's, "" none; then the built-in one):
    {"tables": [{"source", "rows"}], "cpus", "vendor", "digest"}; ValueError naming file, line and problem."""

_LogRecord = tuple[int, str, str, str, float, bool, int | None]

def _log_attach() -> None:
    """Starts queueing Rust's log records for Python (shoal._log's thread)."""

def _log_take(timeout: float) -> list[_LogRecord] | None:
    """Queued records (level, target, message, line, unix time, written to file, rank); None once detached."""

def _log_detach() -> list[_LogRecord]:
    """Stops queueing; returns the records still queued."""
