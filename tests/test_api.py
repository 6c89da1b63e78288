"""The Python API on real jobs: async work, groups, send/recv, argument checks."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import launch

import shoal


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_api_behaviour(transport: str, world: int) -> None:
    proc = launch(world, "api.py", env={"SHOAL_TRANSPORT": transport})
    assert proc.stdout.count("OK api") == world


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_finalize_ends_sub_groups_and_init_works_again(transport: str) -> None:
    """Sub-groups still referenced end with the world: they raise, the fds,
    threads and shared memory go, and init on the same address works again."""
    proc = launch(3, "finalize.py", env={"SHOAL_TRANSPORT": transport}, timeout=120)
    assert proc.stdout.count("OK finalize") == 3


def test_single_process_without_environment() -> None:
    code = (
        "import numpy as np, shoal; shoal.init(); x = np.arange(4.0); shoal.allreduce(x); "
        "print(shoal.rank(), shoal.size(), x.tolist()); shoal.finalize()"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 1 [0.0, 1.0, 2.0, 3.0]"


def test_unknown_algorithm_in_environment_is_a_clear_error() -> None:
    code = "import shoal; shoal.init()"
    env = {**__import__("os").environ, "SHOAL_ALGO": "allreduce:fastest"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "unknown allreduce algorithm 'fastest'" in out.stderr and "ring" in out.stderr


def test_old_broadcast_names_are_aliases() -> None:
    code = (
        "import numpy as np, shoal; g = shoal.init(); x = np.arange(5.0); "
        "shoal.broadcast(x, algorithm='pc'); shoal.broadcast(x, algorithm='topology_aware_pipelined_chain'); "
        "print(g.choose_algorithm('broadcast', 10), sorted(shoal.algorithms('broadcast'))); shoal.finalize()"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    env["SHOAL_ALGO"] = "broadcast:ta_pc"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    chosen, names = out.stdout.split(" ", 1)
    assert chosen == "topology_aware_pipelined_chain"
    assert "'pipelined_chain'" in names and "'pc'" not in names and "'ta_pc'" not in names


def test_algorithm_lists() -> None:
    for coll in (
        "allreduce",
        "broadcast",
        "reduce",
        "allgather",
        "reduce_scatter",
        "alltoall",
        "gather",
        "scatter",
        "barrier",
    ):
        assert shoal.algorithms(coll), coll
    with pytest.raises(ValueError, match="valid: allreduce"):
        shoal.algorithms("allsum")


def test_uninitialized_use_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not initialized"):
        shoal.allreduce(np.zeros(3))


def test_call_description_is_typed_and_names_bad_fields() -> None:
    from shoal._shoal import Call

    c = Call("reduce", count=5, dtype="float16", op="max", root=2, algorithm="binomial")
    assert (c.collective, c.count, c.dtype, c.op, c.root, c.algorithm) == ("reduce", 5, "float16", "max", 2, "binomial")
    assert repr(c) == "Call('reduce', count=5, dtype='float16', op='max', root=2, algorithm='binomial')"
    v = Call("allgather", counts=[3, 0, 1], dtype="int8")
    assert v.counts == [3, 0, 1] and c.counts is None
    assert repr(v) == "Call('allgather', counts=[3, 0, 1], dtype='int8', op='sum', root=0, algorithm=None)"
    with pytest.raises(AttributeError):
        c.count = 6  # type: ignore[misc]
    for kwargs, fragment in [
        ({"collective": "allsum"}, "Call(collective='allsum'): unknown collective 'allsum'"),
        ({"collective": "allreduce", "dtype": "float128"}, "allreduce(dtype='float128'): unsupported dtype"),
        ({"collective": "allreduce", "op": "mean"}, "allreduce(op='mean'): unknown reduction op"),
        ({"collective": "allreduce", "dtype": "int32", "op": "avg"}, "allreduce(op='avg'): op 'avg' needs"),
        ({"collective": "allgather", "count": -1}, "allgather: count=-1 must be >= 0"),
        ({"collective": "broadcast", "root": -2}, "broadcast: root=-2 must be >= 0"),
        ({"collective": "broadcast", "algorithm": "fastest"}, "broadcast(algorithm='fastest'): unknown broadcast"),
        ({"collective": "broadcast", "counts": [1, 2]}, "broadcast: takes no per-rank counts"),
        ({"collective": "allgather", "count": 2, "counts": [1, 2]}, "allgather: pass count or counts, not both"),
        ({"collective": "alltoall", "counts": [1, -2]}, "alltoall: counts=-2 must be >= 0"),
    ]:
        with pytest.raises(ValueError) as e:
            Call(**kwargs)
        assert fragment in str(e.value), (kwargs, str(e.value))
