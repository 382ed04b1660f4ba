"""Image layers: one frozen value per builder call, each rendering its own Dockerfile lines.

``Image.dockerfile()`` renders its layers in order; a layer that copies local files gets the
build-context path ``context_name`` gives it (``_shoal_context/<layer index>/<name>``).
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

__all__ = [
    "CONTEXT_DIR",
    "LAYER_TYPES",
    "PIP_INSTALL",
    "AptPackages",
    "Commands",
    "EnvVars",
    "Layer",
    "PipPackages",
    "Requirements",
    "SourceFile",
    "SourceFolder",
    "WorkDir",
    "context_name",
]

# Where local files are placed inside the build context, one numbered folder per layer.
CONTEXT_DIR = "_shoal_context"

# How every pip layer (packages and requirements files) calls pip.
PIP_INSTALL = "python -m pip install --no-cache-dir"


@dataclass(frozen=True)
class PipPackages:
    packages: tuple[str, ...]
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    pre: bool = False

    def render(self, ctx: str) -> list[str]:
        args = [PIP_INSTALL]
        if self.index_url:
            args.append(f"--index-url {shlex.quote(self.index_url)}")
        args.extend(f"--extra-index-url {shlex.quote(u)}" for u in self.extra_index_urls)
        if self.pre:
            args.append("--pre")
        args.extend(shlex.quote(p) for p in self.packages)
        return ["RUN " + " ".join(args)]


@dataclass(frozen=True)
class AptPackages:
    packages: tuple[str, ...]

    def render(self, ctx: str) -> list[str]:
        names = " ".join(self.packages)
        return [
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            f"--no-install-recommends {names} && rm -rf /var/lib/apt/lists/*"
        ]


@dataclass(frozen=True)
class Requirements:
    path: Path

    def render(self, ctx: str) -> list[str]:
        target = f"/tmp/shoal/{ctx}"
        return [
            f"COPY {json.dumps([ctx, target])}",
            f"RUN {PIP_INSTALL} -r {shlex.quote(target)}",
        ]


@dataclass(frozen=True)
class EnvVars:
    items: tuple[tuple[str, str], ...]

    def render(self, ctx: str) -> list[str]:
        return ["ENV " + " ".join(f"{k}={_env_quote(v)}" for k, v in self.items)]


@dataclass(frozen=True)
class Commands:
    commands: tuple[str, ...]

    def render(self, ctx: str) -> list[str]:
        return [f"RUN {c}" for c in self.commands]


@dataclass(frozen=True)
class WorkDir:
    path: str

    def render(self, ctx: str) -> list[str]:
        return [f"WORKDIR {self.path}"]


@dataclass(frozen=True)
class SourceFolder:
    src: Path
    dst: str = "."
    copy_contents_only: bool = False

    def render(self, ctx: str) -> list[str]:
        target = self.dst if self.copy_contents_only else posixpath.join(self.dst, self.src.name)
        return [f"COPY {json.dumps([ctx, posixpath.normpath(target) + '/'])}"]


@dataclass(frozen=True)
class SourceFile:
    src: Path
    dst: str = "."

    def render(self, ctx: str) -> list[str]:
        target = posixpath.normpath(posixpath.join(self.dst, self.src.name))
        return [f"COPY {json.dumps([ctx, target])}"]


Layer: TypeAlias = (
    "PipPackages | AptPackages | Requirements | EnvVars | Commands | WorkDir | SourceFolder"
    " | SourceFile"
)
LAYER_TYPES = (
    PipPackages, AptPackages, Requirements, EnvVars, Commands, WorkDir, SourceFolder, SourceFile,
)


def context_name(index: int, layer: Layer) -> str:
    if isinstance(layer, Requirements):
        return f"{CONTEXT_DIR}/{index}/{layer.path.name}"
    if isinstance(layer, SourceFolder | SourceFile):
        return f"{CONTEXT_DIR}/{index}/{layer.src.name}"
    return ""


def _env_quote(value: str) -> str:
    # Docker expands $VAR inside ENV values; escape it so the value is taken literally.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'
