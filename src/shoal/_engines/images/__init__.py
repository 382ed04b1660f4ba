"""Container images built on this machine: the builders (Docker buildx, podman, buildah) behind
one small seam, and the registry-free Debian base.

Code outside ``_engines/images/`` imports the names in ``__all__`` from here. Its modules:
``base.py`` (`Builder`: build once per content tag, push, import; `BuildableImage`),
``builders.py`` (the three builders, `find_builder`), ``host_config.py`` (the host's pip
settings and CA bundle as build secrets), ``commands.py`` (the one place their commands run
and fail) and ``debian_base.py`` (``shoal image base``: mmdebstrap, then an import). Used by
the CLI and by every engine; imports no engine. No heavy library.
"""

from __future__ import annotations

from shoal._engines.images.base import BuildableImage, Builder, Built, names_registry
from shoal._engines.images.builders import BUILDERS, check_builder, find_builder
from shoal._engines.images.commands import runtime_hint
from shoal._engines.images.debian_base import (
    DEFAULT_SUITE,
    SUITE_PYTHON,
    check_suite_python,
    make_debian_base,
    resolved_ref,
)
from shoal._engines.images.host_config import HostBuildConfig, host_build_config

__all__ = [
    "BUILDERS",
    "DEFAULT_SUITE",
    "SUITE_PYTHON",
    "BuildableImage",
    "Builder",
    "Built",
    "HostBuildConfig",
    "check_builder",
    "check_suite_python",
    "find_builder",
    "host_build_config",
    "make_debian_base",
    "names_registry",
    "resolved_ref",
    "runtime_hint",
]
