"""`shoal sim plan` and shoal.sim.plan: the simulator's command line and Python API."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shoal import sim
from shoal.cli import main


def test_plan_reports_the_alpha_beta_time_of_a_ring(capsys: pytest.CaptureFixture[str]) -> None:
    args = "sim plan allreduce --algo ring --ranks 4 --size 4MiB --topology star:hosts=4 --json"
    rc = main(args.split())
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    # 2 (p-1) rounds of a quarter each, 1500 B on the wire per 1460 B of data at 10 Gb/s.
    expect = 2 * 3 * (4 << 20) / 4 * 1500 / 1460 * 8 / 10e9
    assert abs(r["time_s"] - expect) / expect < 0.05
    assert r["events"] > 0 and r["events_per_s"] > 0 and r["wall_s"] > 0
    assert (r["engine"], r["hosts"], r["drops"]) == ("packet", 4, 0)


def test_ina_halves_the_ring_time_on_one_switch() -> None:
    ring, ina = (
        sim.plan("allreduce", algo=a, ranks=8, size="8MiB", topology="star:hosts=8", link="10gbit", latency="1us")
        for a in ("ring", "ina")
    )
    assert ina["ina_wrong_results"] == 0
    # ring moves 2 (p-1)/p of the data, INA one pass.
    assert 1.6 < ring["time_s"] / ina["time_s"] < 1.9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topology", "torus:n=4"], "unknown topology"),
        (["--topology", "star:hosts=2"], "need 4 hosts"),
        (["--link", "fast"], "does not start with a number"),
        (["--algo", "nope"], "unknown allreduce algorithm"),
    ],
)
def test_bad_arguments_are_named(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"--algo": "ring", "--topology": "star:hosts=4", "--link": "10gbit"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = ["sim", "plan", "allreduce", "--ranks", "4", "--size", "1MiB"]
    for flag, value in base.items():
        argv += [flag, value]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_sim_usage_lists_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--help"]) == 0
    assert "plan" in capsys.readouterr().out
    assert main(["sim", "nope"]) == 2


def test_sim_plan_starts_without_numpy_or_the_other_subcommands() -> None:
    # numpy was 60% of `import shoal`, the scenario runner and testbed comparison a third of
    # `shoal sim`'s start-up, and shoal.algo (when SHOAL_ALGORITHMS names nothing) half of what was
    # left: `shoal sim plan` at 1024 ranks aims at one second in all.
    code = (
        "import sys\n"
        "from shoal.cli import main\n"
        "assert main('sim plan allreduce --algo ring --ranks 4 --size 1MiB --topology star:hosts=4'.split()) == 0\n"
        "print(sorted(m for m in ('numpy', 'shoal.group', 'shoal.sim.run', 'shoal.sim.panama',"
        " 'shoal.sim.validate', 'shoal.algo') if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SHOAL_ALGORITHMS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.splitlines()[-1] == "[]"


def test_shoal_algo_is_reached_as_an_attribute_of_shoal() -> None:
    # `import shoal` no longer imports shoal.algo; `shoal.algo.register` still works without
    # importing it by name.
    code = "import shoal\nprint(shoal.algo.register.__module__)\n"
    env = {k: v for k, v in os.environ.items() if k != "SHOAL_ALGORITHMS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "shoal.algo._registry"
