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

from shoal._api.image.checks import check_pip_options, check_wheel_package, local_path

__all__ = [
    "CONTEXT_DIR",
    "LAYER_TYPES",
    "PIP_INSTALL",
    "AptPackages",
    "Commands",
    "EnvVars",
    "Layer",
    "PipPackages",
    "PythonWheels",
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


@dataclass(frozen=True, kw_only=True)
class PythonWheels:
    """Install ``package_name`` from the wheels (``*.whl``) in the local folder ``wheel_dir``.

    Flyte 2's layer of the same name, added with ``Image.clone(addl_layer=...)``. The wheels are
    copied into the build context and hashed into the tag. Two pip steps, as Flyte's builder
    does: the first resolves the package's dependencies from the index (the folder as an extra
    source), the second forces the local wheel over whatever the first picked. The folder is
    read only when the tag is computed or the image built: a missing folder gives a tag (of
    "no wheels") but ``write_build_context`` refuses it, naming the folder.
    """

    wheel_dir: Path
    package_name: str
    pre: bool = False
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "wheel_dir", local_path("PythonWheels(wheel_dir)",
                                                          self.wheel_dir))
        check_wheel_package(self.package_name)
        object.__setattr__(self, "extra_index_urls", check_pip_options(
            "PythonWheels", self.index_url, self.extra_index_urls, self.pre))

    def render(self, ctx: str) -> list[str]:
        links = f"--find-links {shlex.quote('/tmp/shoal/' + ctx)}"
        index = [f"--index-url {shlex.quote(self.index_url)}"] if self.index_url else []
        index += [f"--extra-index-url {shlex.quote(u)}" for u in self.extra_index_urls]
        pre = ["--pre"] if self.pre else []
        return [
            f"COPY {json.dumps([ctx, '/tmp/shoal/' + ctx + '/'])}",
            " ".join(["RUN", PIP_INSTALL, *index, *pre, links, self.package_name]),
            " ".join(["RUN", PIP_INSTALL, *pre, "--no-index", "--no-deps", "--force-reinstall",
                      links, self.package_name]),
        ]


Layer: TypeAlias = (
    "PipPackages | AptPackages | Requirements | EnvVars | Commands | WorkDir | SourceFolder"
    " | SourceFile | PythonWheels"
)
LAYER_TYPES = (
    PipPackages, AptPackages, Requirements, EnvVars, Commands, WorkDir, SourceFolder, SourceFile,
    PythonWheels,
)


def context_name(index: int, layer: Layer) -> str:
    if isinstance(layer, Requirements):
        return f"{CONTEXT_DIR}/{index}/{layer.path.name}"
    if isinstance(layer, SourceFolder | SourceFile):
        return f"{CONTEXT_DIR}/{index}/{layer.src.name}"
    if isinstance(layer, PythonWheels):
        return f"{CONTEXT_DIR}/{index}/wheels"
    return ""


def _env_quote(value: str) -> str:
    # Docker expands $VAR inside ENV values; escape it so the value is taken literally.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'
