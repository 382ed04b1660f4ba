"""`Image`: an immutable container-image recipe, in Flyte 2's builder shape.

    image = Image.from_debian_base().with_pip_packages("torch", "datasets")

Every builder method returns a new ``Image``; the original is never changed, so one base can be
shared by several environments. An image renders to a deterministic Dockerfile (same recipe,
byte-identical text) and a content-hash ``tag``: a sha256 over that text and over the bytes of
every local file or folder the recipe copies in, so editing a requirements file or a source file
gives a new tag and a stale image is never reused.

Construction does no I/O (relative paths are made absolute against the current directory, which
is all). Reading the referenced files happens in ``tag``, ``declared_pip_packages`` and
``write_build_context``; a missing file is reported there as a ``SpecError`` naming the builder
call. Locally a task runs in the current interpreter, so ``missing_locally`` lists the declared
packages this interpreter lacks, for the local engine to warn about.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import posixpath
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeAlias

from shoal.errors import SpecError

__all__ = [
    "DEBIAN_BASE_IMAGE",
    "DEFAULT_IMAGE_NAME",
    "SHOAL_INSTALL_TEMPLATE",
    "Image",
    "missing_locally",
    "shoal_requirement",
]

# The base image of ``from_debian_base``; {python_version} is "3.11" and the like.
DEBIAN_BASE_IMAGE = "python:{python_version}-slim-bookworm"
# The repository name an image gets when none is given.
DEFAULT_IMAGE_NAME = "shoal"
# How Shoal itself gets into every image it builds (the in-pod launcher lives in the package).
# {requirement} is ``shoal_requirement()``. To install from a private index or a wheel instead,
# change this one line; the tag follows, since it hashes the rendered text.
SHOAL_INSTALL_TEMPLATE = "RUN python -m pip install --no-cache-dir {requirement}"
# Where local files are placed inside the build context, one numbered folder per layer.
CONTEXT_DIR = "_shoal_context"
# Never copied into an image nor hashed into its tag: caches and VCS metadata.
IGNORED_NAMES = frozenset({"__pycache__", ".git", ".DS_Store", ".mypy_cache", ".pytest_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
TAG_LENGTH = 16
MIN_PYTHON = (3, 10)

_PIP = "python -m pip install --no-cache-dir"

# --- validation grammars ---------------------------------------------------------------------
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"  # a PEP 508 distribution name
_CLAUSE = r"(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+"
_SPECS = rf"{_CLAUSE}(?:\s*,\s*{_CLAUSE})*"
_REQUIREMENT = re.compile(
    rf"^(?P<name>{_NAME})\s*(?:\[\s*(?:{_NAME}(?:\s*,\s*{_NAME})*)?\s*\])?\s*"
    rf"(?:@\s*\S+(?:\s+;\s*\S.*)?|(?:\(\s*{_SPECS}\s*\)|{_SPECS})?\s*(?:;\s*\S.*)?)$"
)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")  # a bare URL pip can install from
_EGG = re.compile(rf"#egg=(?P<name>{_NAME})")
_APT = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?(?:=[A-Za-z0-9.+~:-]+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PYTHON_VERSION = re.compile(r"^3\.(\d{1,2})$")
_REPO_PART = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_REPO_PART}(?:/{_REPO_PART})*$")
_REGISTRY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d+)?(?:/[a-z0-9._-]+)*$")
_IMAGE_REF = re.compile(r"^(?!.*://)[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


# --- layers: one per builder call, each renders its own Dockerfile lines ----------------------


@dataclass(frozen=True)
class PipPackages:
    packages: tuple[str, ...]
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    pre: bool = False

    def render(self, ctx: str) -> list[str]:
        args = [_PIP]
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
            f"RUN {_PIP} -r {shlex.quote(target)}",
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
_LAYER_TYPES = (
    PipPackages, AptPackages, Requirements, EnvVars, Commands, WorkDir, SourceFolder, SourceFile,
)


# --- the image -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Image:
    """A container-image recipe. Build it with ``from_debian_base`` or ``from_base``.

    ``name`` is the repository the image is pushed to (``registry/name:tag``); ``install_shoal``
    adds the Shoal package (``SHOAL_INSTALL_TEMPLATE``) right after the base, which pods need
    for the node launcher.
    """

    base_image: str
    python_version: str | None = None
    name: str = DEFAULT_IMAGE_NAME
    registry: str | None = None
    install_shoal: bool = True
    workdir: str | None = None  # the base's WORKDIR, set before Shoal is installed
    layers: tuple[Layer, ...] = ()

    def __post_init__(self) -> None:
        _check_image_ref("base_image", self.base_image)
        if self.python_version is not None:
            object.__setattr__(self, "python_version", _check_python_version(self.python_version))
        _check_repository(self.name)
        if self.registry is not None:
            _check_registry("registry", self.registry)
        if not isinstance(self.install_shoal, bool):
            raise SpecError("install_shoal", self.install_shoal, "must be a bool", "use True")
        if self.workdir is not None:
            _check_workdir("workdir", self.workdir)
        if not isinstance(self.layers, tuple) or not all(
            isinstance(layer, _LAYER_TYPES) for layer in self.layers
        ):
            raise SpecError("layers", self.layers, "must be a tuple of image layers",
                            "build images with Image.from_debian_base() and the with_* methods")

    # --- constructors ----------------------------------------------------------------------

    @classmethod
    def from_debian_base(
        cls,
        python_version: str | tuple[int, int] | None = None,
        *,
        name: str | None = None,
        registry: str | None = None,
        install_shoal: bool = True,
    ) -> Image:
        """A slim Debian image with CPython ``python_version`` ("3.11"; default: this one's)."""
        if python_version is None:
            version = f"{sys.version_info.major}.{sys.version_info.minor}"
        else:  # "3.11", or (3, 11) as Flyte 2 spells it
            version = _check_python_version(python_version)
        return cls(
            base_image=DEBIAN_BASE_IMAGE.format(python_version=version),
            python_version=version,
            name=DEFAULT_IMAGE_NAME if name is None else name,
            registry=registry,
            install_shoal=install_shoal,
            workdir="/root",
        )

    @classmethod
    def from_base(
        cls,
        image_uri: str,
        *,
        name: str | None = None,
        registry: str | None = None,
        install_shoal: bool = True,
    ) -> Image:
        """An existing image (``"nvcr.io/nvidia/pytorch:24.05-py3"``) with Python and pip.

        With ``install_shoal=False`` and no layers, the image is used as-is: ``uri()`` is
        ``image_uri`` and nothing is built.
        """
        _check_image_ref("image_uri", image_uri)
        return cls(
            base_image=image_uri,
            name=DEFAULT_IMAGE_NAME if name is None else name,
            registry=registry,
            install_shoal=install_shoal,
        )

    # --- builder methods: each returns a new Image -----------------------------------------

    def with_pip_packages(
        self,
        *packages: str,
        index_url: str | None = None,
        extra_index_urls: str | Sequence[str] | None = None,
        pre: bool = False,
    ) -> Image:
        """Add ``pip install`` of ``packages`` ("torch", "numpy>=1.24", "pkg @ https://...")."""
        if not packages:
            raise SpecError(
                "with_pip_packages", packages, "needs at least one package",
                'pass names such as with_pip_packages("torch", "numpy")',
            )
        checked = tuple(_check_requirement(p) for p in packages)
        if index_url is not None:
            _check_url("with_pip_packages(index_url)", index_url)
        if isinstance(extra_index_urls, str):
            extras: tuple[str, ...] = (extra_index_urls,)
        elif extra_index_urls is None:
            extras = ()
        else:
            extras = tuple(extra_index_urls)
        for url in extras:
            _check_url("with_pip_packages(extra_index_urls)", url)
        if not isinstance(pre, bool):
            raise SpecError("with_pip_packages(pre)", pre, "must be a bool", "use pre=True")
        return self._add(PipPackages(checked, index_url, extras, pre))

    def with_apt_packages(self, *packages: str) -> Image:
        """Add ``apt-get install`` of Debian ``packages`` ("git", "curl", "libaio-dev")."""
        if not packages:
            raise SpecError(
                "with_apt_packages", packages, "needs at least one package",
                'pass names such as with_apt_packages("git", "curl")',
            )
        return self._add(AptPackages(tuple(_check_apt(p) for p in packages)))

    def with_requirements(self, file: str | os.PathLike[str]) -> Image:
        """Add ``pip install -r`` of a local requirements file (its bytes go into the tag).

        A ``-r other.txt`` line inside it is read for ``declared_pip_packages`` but not copied
        into the image; list each file with its own ``with_requirements``.
        """
        return self._add(Requirements(_local_path("with_requirements", file)))

    def with_env_vars(self, env_vars: Mapping[str, str]) -> Image:
        """Set environment variables in the image (``ENV``), in sorted order."""
        if not isinstance(env_vars, Mapping) or not env_vars:
            raise SpecError(
                "with_env_vars", env_vars, "must be a non-empty dict of str to str",
                'use with_env_vars({"HF_HOME": "/tmp/hf"})',
            )
        items: list[tuple[str, str]] = []
        for key, value in sorted(env_vars.items(), key=lambda kv: str(kv[0])):
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                raise SpecError(
                    "with_env_vars", key, "a variable name must match [A-Za-z_][A-Za-z0-9_]*",
                    f"use {_env_name_guess(key)!r}",
                )
            if not isinstance(value, str):
                raise SpecError(
                    f"with_env_vars[{key!r}]", value, "values must be strings",
                    f"use {str(value)!r}",
                )
            if "\n" in value or "\r" in value:
                raise SpecError(
                    f"with_env_vars[{key!r}]", value, "values must be one line",
                    "remove the line breaks",
                )
            items.append((key, value))
        return self._add(EnvVars(tuple(items)))

    def with_commands(self, *commands: str | Sequence[str]) -> Image:
        """Add ``RUN`` lines, one per command; a list is taken as several (Flyte 2's shape)."""
        flat: list[str] = []
        for c in commands:
            flat.extend([c] if isinstance(c, str) else list(c))
        if not flat:
            raise SpecError(
                "with_commands", commands, "needs at least one command",
                'use with_commands("pip install -e .")',
            )
        for c in flat:
            if not isinstance(c, str) or not c.strip():
                raise SpecError(
                    "with_commands", c, "each command must be a non-empty string",
                    'use with_commands("nvidia-smi || true")',
                )
            if "\n" in c or "\r" in c:
                raise SpecError(
                    "with_commands", c, "a command must be one line",
                    "pass each line as its own command, or join them with ' && '",
                )
        return self._add(Commands(tuple(flat)))

    def with_workdir(self, path: str) -> Image:
        """Set the working directory (``WORKDIR``); an absolute path such as "/app"."""
        return self._add(WorkDir(_check_workdir("with_workdir", path)))

    def with_source_folder(
        self, src: str | os.PathLike[str], dst: str = ".", *, copy_contents_only: bool = False
    ) -> Image:
        """Copy a local folder to ``dst/<folder name>`` (or its contents into ``dst``).

        ``dst`` is relative to the image's working directory unless absolute. Caches and VCS
        folders (``IGNORED_NAMES``) are left out, of the image and of the tag.
        """
        path = _local_path("with_source_folder", src)
        dst = _check_dst("with_source_folder", dst)
        return self._add(SourceFolder(path, dst, copy_contents_only))

    def with_source_file(self, src: str | os.PathLike[str], dst: str = ".") -> Image:
        """Copy a local file into the folder ``dst`` (keeping its name)."""
        path = _local_path("with_source_file", src)
        return self._add(SourceFile(path, _check_dst("with_source_file", dst)))

    def _add(self, layer: Layer) -> Image:
        return dataclasses.replace(self, layers=(*self.layers, layer))

    # --- rendering -------------------------------------------------------------------------

    @property
    def needs_build(self) -> bool:
        """False only for ``from_base(..., install_shoal=False)`` with nothing added."""
        return self.install_shoal or bool(self.layers)

    def dockerfile(self) -> str:
        """The Dockerfile text; the same recipe always renders byte-identical text."""
        lines = [
            "# Rendered by Shoal from an Image recipe; change the recipe, not this file.",
            f"FROM {self.base_image}",
        ]
        if self.workdir is not None:
            lines.append(f"WORKDIR {self.workdir}")
        # Shoal before the user's layers: it changes rarely, so their layers stay cached.
        if self.install_shoal:
            lines.append(SHOAL_INSTALL_TEMPLATE.format(requirement=shoal_requirement()))
        for i, layer in enumerate(self.layers):
            lines += layer.render(_context_name(i, layer))
        return "\n".join(lines) + "\n"

    def context_sources(self) -> dict[str, Path]:
        """Build-context path (as the Dockerfile names it) -> local path, for every copy."""
        return {ctx: path for ctx, path, _ in self._local_copies()}

    def _local_copies(self) -> list[tuple[str, Path, str]]:
        """(build-context path, local path, builder name) for every layer that copies files."""
        out: list[tuple[str, Path, str]] = []
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Requirements):
                out.append((_context_name(i, layer), layer.path, "with_requirements"))
            elif isinstance(layer, SourceFolder):
                out.append((_context_name(i, layer), layer.src, "with_source_folder"))
            elif isinstance(layer, SourceFile):
                out.append((_context_name(i, layer), layer.src, "with_source_file"))
        return out

    @property
    def tag(self) -> str:
        """A content hash of the Dockerfile and every local file it copies (re-read each time)."""
        digest = hashlib.sha256()
        _feed(digest, b"shoal-image-v1")
        _feed(digest, self.dockerfile().encode())
        for ctx, path, builder in self._local_copies():
            _feed(digest, ctx.encode())
            for kind, rel, payload in _walk(path, builder):
                _feed(digest, kind.encode())
                _feed(digest, rel.encode())
                if kind == "F":
                    _feed_file(digest, payload)
                elif kind == "L":
                    _feed(digest, str(payload).encode())
        return digest.hexdigest()[:TAG_LENGTH]

    def uri(self, registry: str | None = None) -> str:
        """``registry/name:tag`` (``registry`` overrides the image's own), or the base as-is."""
        if not self.needs_build:
            return self.base_image
        reg = self.registry if registry is None else _check_registry("registry", registry)
        ref = f"{self.name}:{self.tag}"
        return f"{reg.rstrip('/')}/{ref}" if reg else ref

    def write_build_context(self, dest: str | os.PathLike[str]) -> Path:
        """Write the Dockerfile and every copied file under ``dest``; return ``dest``.

        ``docker build dest`` then builds exactly what ``tag`` hashed (same ignore rules).
        """
        root = Path(dest)
        root.mkdir(parents=True, exist_ok=True)
        (root / "Dockerfile").write_text(self.dockerfile())
        for ctx, path, builder in self._local_copies():
            for kind, rel, payload in _walk(path, builder):
                target = root / ctx / rel if rel else root / ctx
                if kind == "D":
                    target.mkdir(parents=True, exist_ok=True)
                elif kind == "L":
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(str(payload), target)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(payload, target)
        return root

    def declared_pip_packages(self) -> list[str]:
        """Distribution names this image pip-installs (packages and requirements files).

        URLs without a name and requirements with environment markers (which may not apply
        here) are left out. Reads the requirements files.
        """
        names: list[str] = []
        for layer in self.layers:
            if isinstance(layer, PipPackages):
                names += [n for p in layer.packages if (n := _requirement_name(p))]
            elif isinstance(layer, Requirements):
                names += _read_requirements(layer.path, "with_requirements")
        return list(dict.fromkeys(names))


def missing_locally(image: Image) -> list[str]:
    """Declared pip packages the running interpreter does not have (by metadata, no imports)."""
    import importlib.metadata  # lazy: only the local engine asks, once per image

    installed = {
        _normalize(d.metadata["Name"] or "") for d in importlib.metadata.distributions()
    }
    return [n for n in image.declared_pip_packages() if _normalize(n) not in installed]


def shoal_requirement() -> str:
    """``shoal==<version running here>``, so pods run the Shoal that compiled their manifests."""
    import importlib.metadata

    try:
        return f"shoal=={importlib.metadata.version('shoal')}"
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "shoal"


# --- helpers ---------------------------------------------------------------------------------


def _context_name(index: int, layer: Layer) -> str:
    if isinstance(layer, Requirements):
        return f"{CONTEXT_DIR}/{index}/{layer.path.name}"
    if isinstance(layer, SourceFolder | SourceFile):
        return f"{CONTEXT_DIR}/{index}/{layer.src.name}"
    return ""


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...


def _feed(digest: _Digest, data: bytes) -> None:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently.
    digest.update(len(data).to_bytes(8, "big"))
    digest.update(data)


def _feed_file(digest: _Digest, path: Path | str) -> None:
    p = Path(path)
    mode = p.stat().st_mode
    digest.update(b"x" if mode & stat.S_IXUSR else b"-")
    digest.update(p.stat().st_size.to_bytes(8, "big"))
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)


def _walk(path: Path, field: str) -> Iterator[tuple[str, str, Path | str]]:
    """(kind, relative posix path, file path or link target) for ``path``, in sorted order.

    kind is "F" (file), "D" (folder) or "L" (symlink, not followed inside a folder).
    """
    if field == "with_source_folder":
        if not path.is_dir():
            rule = "is not a folder" if path.exists() else "does not exist"
            raise SpecError(field, str(path), rule, "pass an existing folder (a relative path is "
                            "taken from the working directory when the Image was made)")
    elif not path.is_file():
        rule = "is not a file" if path.exists() else "does not exist"
        raise SpecError(field, str(path), rule, "pass an existing file (a relative path is "
                        "taken from the working directory when the Image was made)")
    if path.is_file():
        yield "F", "", path
        return
    yield "D", "", path
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED_NAMES)
        base = Path(root)
        kept = [f for f in files if f not in IGNORED_NAMES and not f.endswith(IGNORED_SUFFIXES)]
        entries = sorted([(d, True) for d in dirs] + [(f, False) for f in kept])
        for entry, is_dir in entries:
            full = base / entry
            rel = full.relative_to(path).as_posix()
            if full.is_symlink():
                yield "L", rel, os.readlink(full)
            elif is_dir:
                yield "D", rel, full
            else:
                yield "F", rel, full
        # Symlinked folders are recorded as links above and not descended into.
        dirs[:] = [d for d in dirs if not (base / d).is_symlink()]


def _read_requirements(path: Path, field: str, seen: frozenset[Path] = frozenset()) -> list[str]:
    if not path.is_file():
        raise SpecError(field, str(path), "does not exist", "pass an existing requirements file")
    names: list[str] = []
    text = path.read_text().replace("\\\n", "")
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        nested = re.match(r"^(?:-r|--requirement)(?:\s+|=)(\S+)$", line)
        if nested:
            child = (path.parent / nested.group(1)).resolve()
            if child not in seen:
                names += _read_requirements(child, field, seen | {path.resolve()})
            continue
        if line.startswith("-"):
            continue  # options: --index-url, -c constraints, -e editables
        if name := _requirement_name(line):
            names.append(name)
    return names


def _requirement_name(requirement: str) -> str | None:
    match = _REQUIREMENT.match(requirement)
    if match:
        return None if ";" in requirement else match.group("name")
    egg = _EGG.search(requirement)
    return egg.group("name") if egg else None


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _env_quote(value: str) -> str:
    # Docker expands $VAR inside ENV values; escape it so the value is taken literally.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _check_requirement(value: object) -> str:
    field = "with_pip_packages"
    if not isinstance(value, str):
        raise SpecError(field, value, "each package must be a string",
                        'pass names such as with_pip_packages("torch", "numpy")')
    if not value.strip():
        raise SpecError(field, value, "a package must not be empty",
                        'pass names such as "torch" or "numpy>=1.24"')
    if value != value.strip():
        raise SpecError(field, value, "a package must not start or end with whitespace",
                        f"use {value.strip()!r}")
    if _REQUIREMENT.match(value) or _URL.match(value):
        return value
    raise SpecError(field, value, "is not a pip requirement (PEP 508: name[extras] "
                    "version-specifiers; markers, or name @ url)", _requirement_fix(value))


def _requirement_fix(value: str) -> str:
    tokens = value.split()
    if tokens[:2] == ["pip", "install"] and len(tokens) > 2:
        return "drop 'pip install': " + ", ".join(repr(t) for t in tokens[2:])
    if value.startswith(("-r", "--requirement")):
        return "use .with_requirements(path) for a requirements file"
    if value.startswith(("-i", "--index-url")):
        return "use with_pip_packages(..., index_url=URL)"
    if value.startswith("--extra-index-url"):
        return "use with_pip_packages(..., extra_index_urls=[URL])"
    if value == "--pre":
        return "use with_pip_packages(..., pre=True)"
    if value.startswith("-"):
        return "pip options are not packages; pass package names only"
    single = re.match(rf"^({_NAME})\s*=\s*([0-9][A-Za-z0-9.*+!_-]*)$", value)
    if single:
        return f"did you mean {single.group(1) + '==' + single.group(2)!r}?"
    if len(tokens) == 2 and re.match(r"^v?\d", tokens[1]) and re.match(rf"^{_NAME}$", tokens[0]):
        return f"did you mean {tokens[0] + '==' + tokens[1].lstrip('v')!r}?"
    if len(tokens) > 1 and all(_REQUIREMENT.match(t) for t in tokens):
        return "pass each package as its own argument: with_pip_packages(" + ", ".join(
            repr(t) for t in tokens) + ")"
    return 'use a name with optional version specifiers, e.g. "numpy>=1.24,<3"'


def _check_apt(value: object) -> str:
    field = "with_apt_packages"
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, value, "each package must be a non-empty string",
                        'pass names such as with_apt_packages("git", "curl")')
    if _APT.match(value):
        return value
    tokens = value.split()
    if len(tokens) > 1 and all(_APT.match(t) for t in tokens):
        fix = "pass each package as its own argument: with_apt_packages(" + ", ".join(
            repr(t) for t in tokens) + ")"
    elif _APT.match(value.strip().lower()):
        fix = f"Debian package names are lower case: use {value.strip().lower()!r}"
    elif value.startswith("-"):
        fix = "apt-get options are not packages; pass package names only"
    else:
        fix = 'use a Debian package name such as "libaio-dev" (optionally "name=version")'
    raise SpecError(field, value, "is not a Debian package name ([a-z0-9][a-z0-9+.-]+, "
                    "optionally :arch and =version)", fix)


def _check_python_version(value: object) -> str:
    field = "python_version"
    text = ".".join(str(v) for v in value) if isinstance(value, tuple) else value
    if not isinstance(text, str):
        raise SpecError(field, value, 'must be a "3.x" string', 'use python_version="3.11"')
    m = _PYTHON_VERSION.match(text)
    if m is None:
        parts = re.findall(r"\d+", text)
        guess = f"{parts[0]}.{parts[1]}" if len(parts) >= 2 else "3.11"
        raise SpecError(field, value, 'must be "major.minor", such as "3.11"',
                        f"use python_version={guess!r}")
    if (3, int(m.group(1))) < MIN_PYTHON:
        raise SpecError(field, value, f"Shoal needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or "
                        "newer", 'use python_version="3.11"')
    return text


def _check_repository(value: object) -> str:
    if isinstance(value, str) and _REPOSITORY.match(value):
        return value
    guess = re.sub(r"[^a-z0-9._/-]+", "-", str(value).lower()).strip("-./_") or DEFAULT_IMAGE_NAME
    raise SpecError("name", value, "an image name must be lower case: [a-z0-9] parts joined by "
                    "'.', '_' or '-', separated by '/'", f"use name={guess!r}")


def _check_registry(field: str, value: object) -> str:
    if isinstance(value, str) and _REGISTRY.match(value):
        return value
    guess = re.sub(r"^[a-z]+://", "", str(value)).strip().rstrip("/")
    raise SpecError(field, value, "must be a registry host[:port][/path] without a scheme "
                    "or a trailing '/'", f"use {guess or 'ghcr.io/my-org'!r}")


def _check_image_ref(field: str, value: object) -> str:
    if isinstance(value, str) and _IMAGE_REF.match(value):
        return value
    guess = re.sub(r"^[a-z]+://", "", str(value)).strip() if isinstance(value, str) else ""
    raise SpecError(field, value, "must be an image reference such as "
                    '"python:3.11-slim" or "ghcr.io/org/img:tag"',
                    f"use {guess!r}" if guess and _IMAGE_REF.match(guess) else
                    'use "python:3.11-slim-bookworm"')


def _check_url(field: str, value: object) -> str:
    if isinstance(value, str) and re.match(r"^(https?|file)://\S+$", value):
        return value
    guess = f"https://{value.strip()}" if isinstance(value, str) and value.strip() else (
        "https://download.pytorch.org/whl/cu124")
    raise SpecError(field, value, "must be an http(s):// or file:// URL", f"use {guess!r}")


def _env_name_guess(key: object) -> str:
    out = re.sub(r"[^A-Za-z0-9_]+", "_", str(key)).strip("_").upper() or "MY_VAR"
    return "_" + out if out[0].isdigit() else out


def _check_workdir(field: str, value: object) -> str:
    if isinstance(value, str) and value.startswith("/") and not re.search(r"\s", value):
        return value
    guess = "/" + value.strip().strip("./") if isinstance(value, str) else "/app"
    raise SpecError(field, value, "must be an absolute path without spaces", f"use {guess!r}")


def _check_dst(field: str, value: object) -> str:
    if isinstance(value, str) and value and "\n" not in value and "\r" not in value:
        return value
    raise SpecError(f"{field}(dst)", value, "must be a non-empty, one-line path",
                    'use dst="." (the working directory) or an absolute path such as "/app"')


def _local_path(field: str, value: object) -> Path:
    if isinstance(value, str | os.PathLike) and str(value).strip():
        return Path(value).absolute()
    raise SpecError(field, value, "must be a path (str or pathlib.Path)",
                    'use a path such as "requirements.txt" or Path("src")')
