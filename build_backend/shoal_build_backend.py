"""shoal's PEP 517 build backend: maturin's, except that wheels get a manylinux tag.

Through pip, maturin tags wheels ``linux_<arch>`` (``--compatibility off``):
such a wheel installs only on the machine that built it, and PyPI refuses it.
``pip wheel .`` should give a wheel other Linux machines can install, so
``build_wheel`` asks maturin for ``--compatibility pypi``: it audits the built
library's versioned glibc symbols, tags the wheel with the oldest manylinux
policy they allow (manylinux_2_34 on a glibc 2.36 machine), and fails rather
than tag a wheel PyPI would reject. Arguments passed explicitly
(``--config-settings build-args=...`` or ``MATURIN_PEP517_ARGS``) win. Every
other hook (sdist, editable installs, metadata) is maturin's, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import maturin
from maturin import (  # noqa: F401  (re-exported PEP 517 hooks)
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

WHEEL_ARGS = "--compatibility pypi"


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    if not maturin.get_maturin_pep517_args(config_settings):
        config_settings = {**(config_settings or {}), "build-args": WHEEL_ARGS}
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
