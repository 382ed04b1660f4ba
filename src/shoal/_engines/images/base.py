"""The seam of image builders: `Builder`, whose public methods own the guards and call each
builder's private hooks (builders.py: Docker buildx, podman, buildah).

``build(image, *, log) -> ref`` is what the CLI and every engine call. It builds an image
once per content tag: a ref this builder already has locally is not rebuilt, and two
environments (or threads) asking for the same ref at once build it once. The build context
is the image's own (``write_build_context``: the Dockerfile the tag hashes); the host's pip
settings and CA bundle go in as secrets through a Dockerfile of the build's own
(host_config.py), so they change neither the tag nor any layer. A ref that names a registry
(the image's, ``SHOAL_IMAGE_REGISTRY`` or the caller's) is pushed once built. The output of
every command goes to ``log``: the run's logs when an engine builds, a file beside the build
context for ``shoal image build``.

The builders take any object with an image's shape (`BuildableImage`), so the engines never
import the API layer: `shoal.Image` is one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from shoal._engines.images.commands import capture, run_logged
from shoal._engines.images.host_config import HostBuildConfig, host_build_config
from shoal._storage.private import private_dir
from shoal.errors import EngineError, SpecError

__all__ = ["BuildableImage", "Builder", "Built", "names_registry"]

# The first line of every Dockerfile Shoal renders (`Image.dockerfile`): a folder whose
# Dockerfile starts with it is a build context Shoal wrote, which it may replace.
RENDERED_HEADER = "# Rendered by Shoal"


class BuildableImage(Protocol):
    """What a builder needs of an image (`shoal.Image` has it)."""

    @property
    def tag(self) -> str: ...

    @property
    def needs_build(self) -> bool: ...

    def uri(self, registry: str | None = None) -> str: ...

    def write_build_context(self, dest: str | os.PathLike[str]) -> Path: ...


@dataclass(frozen=True)
class Built:
    """What one `Builder.ensure` did: the ref, whether it was built now (False: this builder
    had it), whether it was pushed, and the seconds the build took."""

    ref: str
    built: bool
    pushed: bool
    seconds: float


def names_registry(ref: str) -> bool:
    """Docker's rule: the first part of ``ref`` is a registry when it has a '.' or a ':', or
    is ``localhost``; ``shoal:abc`` and ``org/img:abc`` name none."""
    first, sep, _ = ref.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


# One lock per ref for the whole process: two environments (or engines) with the same image
# build it once; refs of this process already pushed are not pushed again.
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()
_pushed: set[str] = set()


def _lock(ref: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(ref, threading.Lock())


class Builder(ABC):
    """One OCI builder on this machine. ``name`` is how users choose it (``--builder``,
    ``SHOAL_IMAGE_BUILDER``, the config file's ``image.builder``); ``program`` the command it
    runs; ``install`` what to install where it is missing."""

    name: ClassVar[str]
    program: ClassVar[str]
    install: ClassVar[str]

    def __init__(self, path: str) -> None:
        self.path = path  # the program's resolved path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # --- public: the guards --------------------------------------------------------------

    def build(self, image: BuildableImage, *, log: Path, registry: str | None = None,
              context: Path | None = None) -> str:
        """The image's ref, built unless this builder has it, pushed if it names a registry."""
        return self.ensure(image, log=log, registry=registry, context=context).ref

    def ensure(self, image: BuildableImage, *, log: Path, registry: str | None = None,
               context: Path | None = None, fresh: bool = False) -> Built:
        """`build`, saying what it did. ``context``: keep the build context there (a folder
        of its own: an earlier context Shoal wrote is replaced, anything else refused).
        ``fresh``: build even if the image exists, without any cached layer."""
        ref = image.uri(registry)
        if not image.needs_build:  # a base used as-is: nothing to build or push
            return Built(ref, built=False, pushed=False, seconds=0.0)
        with _lock(ref):
            seconds = 0.0
            built = fresh or not self.exists(ref)
            if built:
                seconds = self._build_now(image, ref, log, context, fresh)
            pushed = False
            if names_registry(ref) and (built or ref not in _pushed):
                self.push(ref, log=log)
                _pushed.add(ref)
                pushed = True
        return Built(ref, built=built, pushed=pushed, seconds=seconds)

    def exists(self, ref: str) -> bool:
        """Whether this builder's local store has ``ref``."""
        return capture([self.path, *self._exists_args(ref)]).returncode == 0

    def push(self, ref: str, *, log: Path) -> None:
        """Push ``ref`` to the registry it names (credentials: the builder's own login)."""
        run_logged([self.path, *self._push_args(ref)], log=log, what=f"{self.name} push of {ref}")

    def import_rootfs(self, tarball: Path, ref: str, *, changes: Sequence[str],
                      log: Path) -> None:
        """Make the image ``ref`` from a root filesystem tarball, with Dockerfile
        instructions ``changes`` (``CMD``, ``ENV``) applied to its config."""
        if not tarball.is_file():
            raise SpecError("tarball", str(tarball), "does not exist",
                            "make it first (shoal image base --tarball FILE makes and keeps it)")
        for argv in self._import_commands(tarball, ref, changes):
            run_logged([self.path, *argv], log=log, what=f"{self.name} import of {ref}")

    # --- private hooks: each builder's command lines --------------------------------------

    @abstractmethod
    def _build_args(self, context: Path, dockerfile: Path, ref: str,
                    secrets: dict[str, Path], build_args: dict[str, str],
                    fresh: bool) -> list[str]: ...

    @abstractmethod
    def _exists_args(self, ref: str) -> list[str]: ...

    @abstractmethod
    def _push_args(self, ref: str) -> list[str]: ...

    @abstractmethod
    def _import_commands(self, tarball: Path, ref: str,
                         changes: Sequence[str]) -> list[list[str]]: ...

    def _build_env(self) -> dict[str, str] | None:
        return None  # this process's environment

    # --- the build ------------------------------------------------------------------------

    def _build_now(self, image: BuildableImage, ref: str, log: Path, context: Path | None,
                   fresh: bool) -> float:
        host = host_build_config()
        private_dir(log.parent)
        with tempfile.TemporaryDirectory(prefix="shoal-build-") as tmp:
            folder = Path(tmp)
            where = folder / "context" if context is None else _fresh_context(context)
            image.write_build_context(where)
            dockerfile = folder / "Dockerfile.build"
            dockerfile.write_text(host.build_dockerfile((where / "Dockerfile").read_text()))
            secrets = host.secrets(folder)
            _log_sources(log, host)
            argv = [self.path, *self._build_args(where, dockerfile, ref, secrets,
                                                 host.build_args, fresh)]
            started = time.monotonic()
            run_logged(argv, log=log, what=f"{self.name} build of {ref}", env=self._build_env())
            return time.monotonic() - started


def secret_args(secrets: dict[str, Path], build_args: dict[str, str]) -> list[str]:
    """``--secret id=...,src=...`` and ``--build-arg K=V``: the same flags in all three."""
    out: list[str] = []
    for sid, path in sorted(secrets.items()):
        out += ["--secret", f"id={sid},src={path}"]
    for key, value in sorted(build_args.items()):
        out += ["--build-arg", f"{key}={value}"]
    return out


def _fresh_context(context: Path) -> Path:
    if context.exists():
        dockerfile = context / "Dockerfile"
        first = dockerfile.read_text().split("\n", 1)[0] if dockerfile.is_file() else ""
        if not first.startswith(RENDERED_HEADER):
            raise SpecError("context", str(context), "holds files Shoal did not write (no "
                            "Dockerfile Shoal rendered): it would be replaced",
                            "name an empty or new folder for the build context")
        shutil.rmtree(context)
    return context


def _log_sources(log: Path, host: HostBuildConfig) -> None:
    with open(log, "a") as out:
        given = ", ".join(host.sources) if host.sources else "nothing"
        out.write(f"== shoal: from the host, as build secrets: {given}\n")


def missing(builder: type[Builder], why: str) -> EngineError:
    return EngineError(f"the {builder.name} image builder cannot be used: {why}. "
                       f"Fix: {builder.install}")
