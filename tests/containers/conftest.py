"""The container tier's fixtures: a containers storage of the session's own, and the Debian base
image made in it from the mirror, once per session (README.md beside this file).

They skip, naming what is missing, where podman, buildah, runc or mmdebstrap are absent or
the tests do not run as root; with SHOAL_REQUIRE_CONTAINERS=1 (set by .ci/run, which also
installs them) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

# What the tier needs on PATH (runc: crun cannot run containers on some cgroup layouts).
TOOLS = ("podman", "buildah", "runc", "mmdebstrap")
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
SUITE = "bookworm"
BASE = f"docker.io/library/python:{PYTHON}-slim-{SUITE}"
# Free memory (in /dev/shm) from which the session's images are kept there, not on disk.
STORAGE_IN_MEMORY_MIN = 4 << 30


def _unavailable(why: str) -> NoReturn:
    if os.environ.get("SHOAL_REQUIRE_CONTAINERS") == "1":
        pytest.fail(f"{why}\n(SHOAL_REQUIRE_CONTAINERS=1: the container tier must run here)")
    pytest.skip(why)


@dataclass(frozen=True)
class Storage:
    """The session's containers storage: podman and buildah see only its images."""

    root: Path
    conf: Path

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], capture_output=True, text=True,
                              timeout=timeout, check=False)


def _temp_root(factory: pytest.TempPathFactory) -> Path:
    """pytest's ``pytest-of-<user>`` folder: it outlives the numbered session folders."""
    base = factory.getbasetemp()
    for folder in (base, *base.parents):
        if folder.name.startswith("pytest-of-"):
            return folder
    return base.parent


@pytest.fixture(scope="session")
def container_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Storage]:
    """A storage (graphroot, runroot) under the session's temp folder, named to podman and
    buildah by CONTAINERS_STORAGE_CONF for the whole session: the tests neither see nor touch
    the machine's images. The runtime settings are the machine's (CONTAINERS_CONF)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        _unavailable(f"the container tier needs {', '.join(missing)} (apt-get install podman "
                     "buildah runc mmdebstrap)")
    if os.geteuid() != 0:
        _unavailable("the container tier runs podman and mmdebstrap as root")
    if not os.environ.get("CONTAINERS_CONF"):
        _unavailable("CONTAINERS_CONF is not set: .ci/run writes a containers.conf with "
                     "[engine] runtime = \"runc\" and [containers] default_ulimits (see "
                     "tests/containers/README.md)")
    root = tmp_path_factory.mktemp("containers")
    # The images' files in memory where there is room: writing and removing ~1 GB of small
    # files on a busy disk took longer than the builds.
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free >= STORAGE_IN_MEMORY_MIN:
        layers = Path(tempfile.mkdtemp(prefix="shoal-containers-", dir=shm))
    else:
        layers = root
    conf = root / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{layers / "graph"}"\n'
                    f'runroot = "{layers / "run"}"\n')
    storage = Storage(root, conf)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CONTAINERS_STORAGE_CONF", str(conf))
        try:
            yield storage
        finally:
            storage.podman("image", "unmount", "--all")
            for folder in ("graph", "run"):
                shutil.rmtree(layers / folder, ignore_errors=True)
            if layers != root:
                shutil.rmtree(layers, ignore_errors=True)


@pytest.fixture(scope="session")
def debian_base(container_storage: Storage, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The base ``Image.from_debian_base()`` builds FROM, made by ``shoal image base``. The
    root filesystem tarball is kept under pytest's temp root, so a later session skips
    mmdebstrap; the image itself is imported into each session's storage."""
    from shoal.cli.main import main

    tarball = _temp_root(tmp_path_factory) / f"shoal-debian-base-{SUITE}-{PYTHON}.tar"
    log = container_storage.root / "base.log"
    started = time.monotonic()
    fresh = not tarball.is_file()
    code = main(["image", "base", "--python", PYTHON, "--suite", SUITE, "--builder", "podman",
                 "--tarball", str(tarball), "--log", str(log)])
    assert code == 0, log.read_text()[-3000:]
    print(f"\ncontainer tier: the Debian base {'bootstrapped and ' if fresh else ''}imported "
          f"in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return BASE
