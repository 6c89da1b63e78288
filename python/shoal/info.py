"""What ``shoal info`` reports: the configuration in effect and what this
machine allows shoal to do.

Every section is plain data (:func:`report`), printed as text by
:func:`render` or as JSON by ``shoal info --json``. The machine's facts come
from the files the kernel publishes, so reading them needs no privileges.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, get_args

from shoal._types import CollectiveName

#: Collectives whose algorithms are listed (in the order of the docs).
COLLECTIVES: tuple[CollectiveName, ...] = get_args(CollectiveName)

PTRACE_SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
DEFAULT_CC = Path("/proc/sys/net/ipv4/tcp_congestion_control")
DEV_SHM = "/dev/shm"


def _read(path: Path) -> str | None:
    """The stripped text of a /proc file, None where it does not exist or cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def variables() -> list[dict[str, str]]:
    """Every SHOAL_* variable: name, default, meaning, current value and its source (env or default).

    A blank value counts as unset, as shoal reads it."""
    from shoal import _shoal

    rows = []
    for v in _shoal.config_variables():
        value = os.environ.get(v["name"], "").strip()
        rows.append(
            {
                "name": v["name"],
                "default": v["default"],
                "value": value or v["default"],
                "source": "env" if value else "default",
                "meaning": v["meaning"],
            }
        )
    return rows


def cma(scope_text: str | None, euid: int) -> dict[str, Any]:
    """Whether ranks may read each other's memory (``process_vm_readv``, the single-copy shm path).

    Yama's ptrace_scope decides for processes of one user: 0 (or no Yama)
    allows it, 1 only for a process's descendants (ranks are siblings), 2
    only with CAP_SYS_PTRACE (assumed for root), 3 never. Where it is not
    allowed, shared memory copies through its rings."""
    scope = int(scope_text) if scope_text and scope_text.isdigit() else None
    allowed = scope in (None, 0) or (scope in (1, 2) and euid == 0)
    why = "no Yama" if scope is None else f"ptrace_scope={scope}"
    return {"allowed": allowed, "ptrace_scope": scope, "why": why}


def dev_shm(path: str = DEV_SHM) -> dict[str, Any]:
    """Size and free space of the shared-memory filesystem holding shoal's rings."""
    try:
        st = os.statvfs(path)
    except OSError as e:
        return {"path": path, "error": e.strerror or str(e)}
    return {
        "path": path,
        "size_bytes": st.f_blocks * st.f_frsize,
        "free_bytes": st.f_bavail * st.f_frsize,
        "writable": os.access(path, os.W_OK),
    }


def congestion_control(wanted: str, named: bool) -> dict[str, Any]:
    """The kernel's congestion controls and the one shoal's connections use.

    `wanted` is SHOAL_TCP_CC's value, `named` whether the user set it: the
    default (cubic) quietly falls back to the system's where the kernel
    lacks it, while a named one the kernel lacks fails init."""
    available = (_read(AVAILABLE_CC) or "").split()
    system = _read(DEFAULT_CC)
    if wanted == "system" or (available and wanted not in available and not named):
        in_effect = system
    elif available and wanted not in available:
        in_effect = f"none: the kernel lacks {wanted}, init fails"
    else:
        in_effect = wanted
    return {"available": available, "system_default": system, "shoal": in_effect}


def launcher() -> dict[str, Any]:
    """The launcher convention shoal.init() would follow here, or why the environment is inconsistent."""
    from shoal import _shoal

    try:
        return dict(_shoal.detect_launcher())
    except ValueError as e:
        return {"source": "invalid", "error": str(e)}


def ina(values: dict[str, str]) -> dict[str, Any]:
    """The in-network aggregation settings: the switches, or that none is configured."""
    switches = [s.strip() for s in values["SHOAL_SWITCH"].split(",") if s.strip()]
    return {
        "configured": bool(switches),
        "switches": switches,
        "timeout_s": values["SHOAL_INA_TIMEOUT"],
        "int32": values["SHOAL_INA_INT32"],
        "payload_bytes": values["SHOAL_INA_PAYLOAD"],
    }


def tuning() -> dict[str, Any]:
    """The tuning tables the selector consults before its cost model (docs/tuning.md), in order:
    SHOAL_TUNE_FILE's, then the built-in one, each with its source and rows; `cpus` and `vendor` are
    this host's CPU count and CPU maker, which `cpus=` and `vendor=` rows are matched against. A
    table that does not load gives `error` (init would fail with it) and the built-in table alone."""
    from shoal import _shoal

    try:
        return {**_shoal.tune_tables(), "error": None}
    except ValueError as e:
        return {**_shoal.tune_tables(""), "error": str(e)}


def report() -> dict[str, Any]:
    """Everything ``shoal info`` shows, as JSON-ready data."""
    import shoal
    from shoal import _shoal

    rows = variables()
    values = {r["name"]: r["value"] for r in rows}
    from_env = {r["name"] for r in rows if r["source"] == "env"}
    shm = dev_shm()
    return {
        "version": shoal.__version__,
        "algorithms": {c: list(shoal.algorithms(c)) for c in COLLECTIVES},
        "variables": rows,
        # What init would refuse about these values (None: nothing).
        "config_error": _shoal.config_error(),
        "transports": {
            "selected": values["SHOAL_TRANSPORT"],
            "shm": bool(shm.get("writable")),
            "tcp": True,
        },
        "capabilities": {
            "cma": cma(_read(PTRACE_SCOPE), os.geteuid()),
            "dev_shm": shm,
            "congestion_control": congestion_control(values["SHOAL_TCP_CC"], "SHOAL_TCP_CC" in from_env),
        },
        "launcher": launcher(),
        "ina": ina(values),
        "tuning": tuning(),
    }


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def render(r: dict[str, Any]) -> str:
    """The report as text, one section per heading."""
    out = [f"shoal {r['version']}", "", "algorithms:"]
    out += [f"  {c:15s} {', '.join(algos)}" for c, algos in r["algorithms"].items()]
    verdict = f"invalid, init fails: {r['config_error']}" if r["config_error"] else "valid"
    out += ["", f"configuration ({verdict}):"]
    width = max(len(v["name"]) for v in r["variables"])
    for v in r["variables"]:
        shown = v["value"] if v["value"] else "(unset)"
        out.append(f"  {v['name']:{width}s} {shown}  [{v['source']}]")
    t = r["transports"]
    out += ["", f"transports: {t['selected']} (shm {'available' if t['shm'] else 'unavailable'}, tcp available)"]
    caps = r["capabilities"]
    c = caps["cma"]
    out.append(f"  cma (single-copy shm): {'allowed' if c['allowed'] else 'not allowed'} ({c['why']})")
    shm = caps["dev_shm"]
    if "error" in shm:
        out.append(f"  {shm['path']}: {shm['error']}")
    else:
        out.append(f"  {shm['path']}: {_mib(shm['size_bytes'])}, {_mib(shm['free_bytes'])} free")
    cc = caps["congestion_control"]
    out.append(
        f"  tcp congestion control: {cc['shoal']} (available: {' '.join(cc['available']) or 'unknown'};"
        f" system default: {cc['system_default'] or 'unknown'})"
    )
    lr = r["launcher"]
    if "error" in lr:
        out += ["", f"launcher: invalid environment: {lr['error']}"]
    else:
        master = f"{lr['master_addr']}:{lr['master_port']}" if lr["master_addr"] else "none needed"
        store = lr["store_path"] or lr["store_addr"] or master
        out += [
            "",
            f"launcher: {lr['source']} (rank {lr['rank']} of {lr['world_size']}, job {lr['job_id']}, store {store})",
        ]
    i = r["ina"]
    if i["configured"]:
        out.append(
            f"ina: switches {', '.join(i['switches'])} (timeout {i['timeout_s']} s, int32 {i['int32']},"
            f" payload {i['payload_bytes']} bytes)"
        )
    else:
        out.append("ina: no switch configured (SHOAL_SWITCH)")
    return "\n".join(out + render_tuning(r["tuning"]))


def render_tuning(t: dict[str, Any]) -> list[str]:
    """The tables section: each table's source and rows, in the order the selector reads them."""
    host = f"this host: {t['cpus']} cpus, vendor {t['vendor']}"
    out = ["", f"tuning tables (first matching row wins, then the cost model; {host}):"]
    if t["error"]:
        out.append(f"  SHOAL_TUNE_FILE does not load, init fails: {t['error']}")
    for table in t["tables"]:
        out.append(f"  {table['source']}: {len(table['rows'])} row(s)")
        out += [f"    {row}" for row in table["rows"]]
    return out
