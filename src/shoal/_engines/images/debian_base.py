"""A registry-free base image: the Python image ``Image.from_debian_base()`` builds FROM, made
from the Debian mirror and tagged locally (``shoal image base``; docs/images.md).

``mmdebstrap --variant=minbase`` writes a root filesystem tarball of a Debian suite with
its own Python (bookworm: 3.11, trixie: 3.13) and pip; PEP 668's ``EXTERNALLY-MANAGED``
marker is removed so the Dockerfile's ``python -m pip install`` works as in the python
images. The builder imports it under the name the Dockerfile's ``FROM`` resolves to
(``python:3.11-slim-bookworm`` is ``docker.io/library/python:3.11-slim-bookworm`` to Docker,
and to podman and buildah through their short-name alias), so a build finds it locally and
reaches for no registry.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from shoal._engines.images.base import Builder, names_registry
from shoal._engines.images.commands import run_logged
from shoal.errors import EngineError, SpecError

__all__ = ["DEFAULT_SUITE", "SUITE_PYTHON", "check_suite_python", "make_debian_base",
           "mmdebstrap_argv", "resolved_ref"]

# The Python each Debian suite carries (python3's version there).
SUITE_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
DEFAULT_SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "python3-venv", "python-is-python3", "ca-certificates")
# As the python images: docs, man pages and translations left out; `python3` to run.
DPKG_OPTIONS = ("path-exclude=/usr/share/man/*", "path-exclude=/usr/share/doc/*",
                "path-include=/usr/share/doc/*/copyright", "path-exclude=/usr/share/locale/*")
IMPORT_CHANGES = ('CMD ["python3"]', "ENV LANG=C.UTF-8")


def check_suite_python(python: str, suite: str) -> None:
    """Refuse a suite Shoal does not know, or a Python the suite does not carry."""
    if suite not in SUITE_PYTHON:
        raise SpecError("--suite", suite, "must be a Debian suite whose Python Shoal knows: "
                        + ", ".join(f"{s} (Python {v})" for s, v in SUITE_PYTHON.items()),
                        f"use --suite {DEFAULT_SUITE}")
    if SUITE_PYTHON[suite] != python:
        carrier = [s for s, v in SUITE_PYTHON.items() if v == python]
        fix = (f"use --suite {carrier[0]}, which carries Python {python}" if carrier else
               f"use --python {SUITE_PYTHON[suite]}, or build FROM python:{python}-slim from "
               "a registry (Image.from_base)")
        raise SpecError("--python", python, f"Debian {suite} carries Python "
                        f"{SUITE_PYTHON[suite]} only", fix)


def resolved_ref(ref: str) -> str:
    """The fully qualified name Docker gives ``ref`` (``python:3.11`` ->
    ``docker.io/library/python:3.11``); podman's short-name alias for python says the same."""
    if names_registry(ref):
        return ref
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


def mmdebstrap_argv(suite: str, tarball: Path, mirror: str | None = None) -> list[str]:
    """The mmdebstrap command that writes the base's root filesystem to ``tarball``."""
    argv = ["mmdebstrap", "--variant=minbase", "--format=tar", "--include=" + ",".join(PACKAGES),
            *(f"--dpkgopt={o}" for o in DPKG_OPTIONS),
            "--customize-hook=rm -f \"$1\"/usr/lib/python3*/EXTERNALLY-MANAGED",
            suite, str(tarball)]
    return [*argv, mirror] if mirror else argv


def make_debian_base(builder: Builder, ref: str, *, python: str, suite: str, log: Path,
                     tarball: Path | None = None, mirror: str | None = None) -> str:
    """Import the base ``ref`` (made fully qualified) into ``builder``; its full name.

    ``tarball``: the root filesystem to import, made there first if missing (and kept);
    None: made in a temporary folder and removed.
    """
    check_suite_python(python, suite)
    full = resolved_ref(ref)
    with tempfile.TemporaryDirectory(prefix="shoal-base-") as tmp:
        rootfs = tarball if tarball is not None else Path(tmp) / f"{suite}.tar"
        if not rootfs.is_file():
            bootstrap(suite, rootfs, log=log, mirror=mirror)
        builder.import_rootfs(rootfs, full, changes=IMPORT_CHANGES, log=log)
    return full


def bootstrap(suite: str, tarball: Path, *, log: Path, mirror: str | None = None) -> None:
    """Write the root filesystem tarball (to a temporary name first: a tarball that exists
    is always whole)."""
    if shutil.which("mmdebstrap") is None:
        raise EngineError("the base image is made with mmdebstrap, which is not installed. "
                          "Fix: apt-get install mmdebstrap")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_name(f".{tarball.name}.{os.getpid()}.partial")
    try:
        run_logged(mmdebstrap_argv(suite, partial, mirror), log=log,
                   what=f"mmdebstrap of Debian {suite}")
        os.replace(partial, tarball)
    finally:
        partial.unlink(missing_ok=True)
