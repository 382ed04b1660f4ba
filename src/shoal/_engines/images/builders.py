"""The three builders, and which one a build uses.

- ``docker``: ``docker buildx build --load`` (``docker build`` with BuildKit where the buildx
  plugin is absent, as with a podman-backed ``docker``), usable when an engine answers
  ``docker version --format {{.Server.Version}}`` (Docker and podman both do; ``docker info
  --format {{.ServerVersion}}`` fails on podman).
- ``podman``: ``podman build``.
- ``buildah``: ``buildah build --layers`` (buildah caches no layers without it).

`find_builder` takes the one named (``--builder``, ``$SHOAL_IMAGE_BUILDER``, the config
file's ``image.builder``, in that order), else the first of `BUILDERS` this machine can use;
a named one that cannot be used, or none at all, is an EngineError saying what to install.
"""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from shoal import _contract as contract
from shoal._engines.images.base import Builder, missing, secret_args
from shoal._engines.images.commands import capture
from shoal.errors import EngineError, SpecError

__all__ = ["BUILDERS", "Buildah", "DockerBuildx", "Podman", "check_builder", "find_builder"]


class DockerBuildx(Builder):
    name = "docker"
    program = "docker"
    install = ("install Docker with its buildx plugin (docker-ce and docker-buildx-plugin) "
               "and start it, or use podman (apt-get install podman)")

    def __init__(self, path: str, *, buildx: bool) -> None:
        super().__init__(path)
        self.buildx = buildx  # False: `docker build` (BuildKit), as a podman-backed docker has

    def _build_args(self, context: Path, dockerfile: Path, ref: str,
                    secrets: dict[str, Path], build_args: dict[str, str],
                    fresh: bool) -> list[str]:
        head = ["buildx", "build", "--load"] if self.buildx else ["build"]
        return [*head, "-f", str(dockerfile), "-t", ref, *secret_args(secrets, build_args),
                *(["--no-cache"] if fresh else []), str(context)]

    def _build_env(self) -> dict[str, str] | None:
        # `docker build` passes --secret only with BuildKit (Docker < 23 needs asking).
        return None if self.buildx else {**os.environ, "DOCKER_BUILDKIT": "1"}

    def _exists_args(self, ref: str) -> list[str]:
        return ["image", "inspect", "--format", "{{.Id}}", ref]

    def _push_args(self, ref: str) -> list[str]:
        return ["push", ref]

    def _import_commands(self, tarball: Path, ref: str,
                         changes: Sequence[str]) -> list[list[str]]:
        return [["import", *_changes(changes), str(tarball), ref]]


class Podman(Builder):
    name = "podman"
    program = "podman"
    install = "install podman (apt-get install podman runc)"

    def _build_args(self, context: Path, dockerfile: Path, ref: str,
                    secrets: dict[str, Path], build_args: dict[str, str],
                    fresh: bool) -> list[str]:
        return ["build", "-f", str(dockerfile), "-t", ref, *secret_args(secrets, build_args),
                *(["--no-cache"] if fresh else []), str(context)]

    def _exists_args(self, ref: str) -> list[str]:
        return ["image", "exists", ref]

    def _push_args(self, ref: str) -> list[str]:
        return ["push", ref]

    def _import_commands(self, tarball: Path, ref: str,
                         changes: Sequence[str]) -> list[list[str]]:
        return [["import", *_changes(changes), str(tarball), ref]]


class Buildah(Builder):
    name = "buildah"
    program = "buildah"
    install = "install buildah (apt-get install buildah runc)"

    def _build_args(self, context: Path, dockerfile: Path, ref: str,
                    secrets: dict[str, Path], build_args: dict[str, str],
                    fresh: bool) -> list[str]:
        return ["build", "--layers", "-f", str(dockerfile), "-t", ref,
                *secret_args(secrets, build_args), *(["--no-cache"] if fresh else []),
                str(context)]

    def _exists_args(self, ref: str) -> list[str]:
        return ["inspect", "--type", "image", "--format", "{{.FromImageID}}", ref]

    def _push_args(self, ref: str) -> list[str]:
        return ["push", ref]

    def _import_commands(self, tarball: Path, ref: str,
                         changes: Sequence[str]) -> list[list[str]]:
        # buildah has no `import`: a scratch container, the tarball added (unpacked) at /,
        # its config set, committed. The container is named by the ref's tag so a failed
        # import's leftover is recognisable.
        box = "shoal-import-" + "".join(c if c.isalnum() else "-" for c in ref)[-40:]
        config: list[str] = []
        for change in changes:
            word, _, rest = change.partition(" ")
            config += [f"--{word.lower()}", rest]  # CMD [..] -> --cmd [..], ENV K=V -> --env K=V
        return [["from", "--name", box, "scratch"], ["add", box, str(tarball), "/"],
                ["config", *config, box], ["commit", "--rm", box, ref]]


BUILDERS: tuple[type[Builder], ...] = (DockerBuildx, Podman, Buildah)
BY_NAME = {b.name: b for b in BUILDERS}


def _changes(changes: Sequence[str]) -> list[str]:
    return [arg for change in changes for arg in ("--change", change)]


def check_builder(field: str, value: object) -> str:
    """A builder name (``docker``, ``podman``, ``buildah``), else a SpecError saying so."""
    if isinstance(value, str) and value in BY_NAME:
        return value
    close = difflib.get_close_matches(str(value), list(BY_NAME), n=1)
    fix = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(BY_NAME)}"
    raise SpecError(field, value, f"must be one of {', '.join(BY_NAME)}", fix)


def _usable(cls: type[Builder]) -> Builder | str:
    """The builder, or why this machine cannot use it."""
    path = shutil.which(cls.program)
    if path is None:
        return f"no `{cls.program}` command on PATH"
    if cls is DockerBuildx:
        probe = capture([path, "version", "--format", "{{.Server.Version}}"], timeout=20)
        if probe.returncode != 0:
            said = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            return f"no Docker engine answers `docker version` ({said})"
        buildx = capture([path, "buildx", "version"], timeout=20).returncode == 0
        return DockerBuildx(path, buildx=buildx)
    probe = capture([path, "--version"], timeout=20)
    if probe.returncode != 0:
        return f"`{cls.program} --version` failed: {probe.stderr.strip()[-200:]}"
    return cls(path)


def find_builder(name: str | None = None, *, configured: str | None = None,
                 field: str = "--builder") -> Builder:
    """The builder named by ``name``, else ``$SHOAL_IMAGE_BUILDER``, else ``configured`` (the
    config file's), else the first of `BUILDERS` usable here."""
    chosen, where = name, field
    if chosen is None and os.environ.get(contract.IMAGE_BUILDER):
        chosen, where = os.environ[contract.IMAGE_BUILDER], contract.IMAGE_BUILDER
    if chosen is None and configured is not None:
        chosen, where = configured, "image.builder"
    if chosen is not None:
        cls = BY_NAME[check_builder(where, chosen)]
        found = _usable(cls)
        if isinstance(found, str):
            raise missing(cls, found)
        return found
    reasons: list[str] = []
    for cls in BUILDERS:
        found = _usable(cls)
        if isinstance(found, Builder):
            return found
        reasons.append(f"{cls.name}: {found}")
    raise EngineError("no image builder can be used on this machine (" + "; ".join(reasons)
                      + "). Fix: install podman (apt-get install podman runc), or buildah, "
                      "or Docker with its buildx plugin")
