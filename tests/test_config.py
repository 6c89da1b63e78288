"""SHOAL_* configuration: every variable is checked at init, and the table of
variables (Rust's `config::VARIABLES`, exported as `_shoal.config_variables()`)
agrees with docs/configuration.md and with the variables the code reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import init_with

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("name", "value", "hint"),
    [
        # Checked even without SHOAL_SWITCH: a typo shows before a switch does.
        ("SHOAL_INA_TIMEOUT", "soon", "seconds"),
        ("SHOAL_INA_TIMEOUT", "inf", "at most 86400"),
        ("SHOAL_INA_PAYLOAD", "jumbo", "whole number, 64 to 65507"),
        ("SHOAL_INA_PAYLOAD", "70000", "at most 65507"),
        ("SHOAL_INA_INT32", "maybe", "0 or 1"),
        ("SHOAL_CALIBRATE", "sometimes", "0 or 1"),
        ("SHOAL_CHUNK_BYTES", "99999999999999999", "64 to 1099511627776"),
        ("SHOAL_SHM_RING_BYTES", "2000000000", "4096 to 1073741824"),
        ("SHOAL_ALGO", "allreduce:fastest", "SHOAL_ALGO"),
    ],
)
def test_garbage_is_an_error_naming_the_variable(name: str, value: str, hint: str) -> None:
    proc = init_with({name: value})
    assert proc.returncode != 0 and "initialised" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError:"), proc.stderr
    assert name in last and value in last and hint in last, last


@pytest.mark.parametrize("value", ["true", "yes", "on", "1", "false", "off", "0", "No"])
def test_flags_take_the_usual_spellings(value: str) -> None:
    proc = init_with({"SHOAL_CALIBRATE": value, "SHOAL_INA_INT32": value})
    assert proc.returncode == 0, proc.stderr


# --- the table of variables -------------------------------------------------


def _read_in_code() -> set[str]:
    """Every SHOAL_* variable the code reads (not merely mentions in an error)."""
    reads = re.compile(
        r"""(?:env|var|getenv|environ\.get|nonempty|value|flag|whole|seconds|environ\[)\s*\(?\s*(?:env,\s*)?["'](SHOAL_[A-Z0-9_]+)["']"""
    )
    found: set[str] = set()
    for base in (ROOT / "crates", ROOT / "python"):
        for path in [*base.rglob("*.rs"), *base.rglob("*.py")]:
            if "/tests/" in str(path) or "target" in path.parts:
                continue
            found |= set(reads.findall(path.read_text()))
    # Rust test children's variables (crates/*/tests) are excluded above.
    return found


def _documented() -> dict[str, str]:
    """The variables of docs/configuration.md's table: name -> default cell."""
    rows: dict[str, str] = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        m = re.match(r"\| `(SHOAL_[A-Z0-9_]+)` \| (.*?) \|", line)
        if m:
            rows[m[1]] = m[2]
    return rows


def test_the_docs_table_is_one_table() -> None:
    """A blank line inside a markdown table ends it: the rows after it render as text."""
    lines = (ROOT / "docs" / "configuration.md").read_text().splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| `SHOAL_")]
    assert rows == list(range(rows[0], rows[-1] + 1)), "the SHOAL_* table is broken by a non-row line"


def test_every_variable_read_is_in_the_table_and_the_docs() -> None:
    from shoal import _shoal

    table = {v["name"] for v in _shoal.config_variables()}
    read = _read_in_code()
    docs = set(_documented())
    assert read, "the scan found no reads at all"
    assert read <= table, f"read but not in config.rs's VARIABLES: {sorted(read - table)}"
    assert table == docs, f"table only: {sorted(table - docs)}; docs only: {sorted(docs - table)}"


def test_table_defaults_match_the_docs() -> None:
    from shoal import _shoal

    docs = _documented()
    for v in _shoal.config_variables():
        assert set(v) == {"name", "default", "meaning", "read_in"}, v
        assert v["meaning"] and v["read_in"], v
        if v["default"]:
            assert v["default"] in docs[v["name"]], (v["name"], v["default"], docs[v["name"]])
