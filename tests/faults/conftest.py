"""The fault tier: faults injected with what the kernel offers root (network namespaces, mount
namespaces, tmpfs). Where this machine does not allow one, its test skips with the reason; with
SHOAL_REQUIRE_FAULTS=1 (set by .ci/run, which runs as root) it fails instead."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

SBIN = "/usr/sbin:/sbin"

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the dev extra is not installed: the fuzz tests skip themselves
    pass
else:
    # The fuzz tests' one setting: 25 derandomized examples a property, 2,500 random ones with
    # SHOAL_FUZZ_PROFILE=deep.
    settings.register_profile("quick", max_examples=25, deadline=None, derandomize=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("deep", max_examples=2500, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile(os.environ.get("SHOAL_FUZZ_PROFILE", "quick"))


def unavailable(why: str) -> None:
    """Skip the test, or fail it where the fault tier must run (CI)."""
    if os.environ.get("SHOAL_REQUIRE_FAULTS") == "1":
        pytest.fail(f"{why}\n(SHOAL_REQUIRE_FAULTS=1: the fault tier must run here)")
    pytest.skip(why)


def tool(name: str) -> str:
    """The path of a system tool, or the test is unavailable here."""
    path = shutil.which(name) or shutil.which(name, path=SBIN)
    if path is None:
        unavailable(f"needs `{name}`, which is not installed")
    assert path is not None
    return path


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        unavailable(f"{what} needs root (run as root, as .ci/run does)")


def sh(*argv: str) -> None:
    """Run a setup command; a failure names the command and what it said."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        unavailable(f"`{' '.join(argv)}` failed here: {done.stderr.strip()}")
