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

The recipe's parts live next to this file: ``layers.py`` (one layer per builder call and
its Dockerfile lines, and ``PythonWheels``, the layer Flyte 2 code adds with ``clone``),
``context.py`` (the local files copied in and hashed into the tag), ``checks.py``
(argument checks and requirement parsing) and ``script.py`` (a script's PEP 723 block).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shoal import _contract as contract
from shoal._api.image.checks import (
    DEFAULT_IMAGE_NAME,
    check_apt,
    check_commands,
    check_dst,
    check_env_vars,
    check_image_ref,
    check_pip_options,
    check_python_version,
    check_registry,
    check_repository,
    check_requirement,
    check_workdir,
    local_path,
    normalize_name,
    read_requirements,
    requirement_name,
)
from shoal._api.image.checks import MIN_PYTHON as MIN_PYTHON
from shoal._api.image.context import IGNORED_NAMES as IGNORED_NAMES
from shoal._api.image.context import IGNORED_SUFFIXES as IGNORED_SUFFIXES
from shoal._api.image.context import feed, feed_file, walk
from shoal._api.image.layers import CONTEXT_DIR as CONTEXT_DIR
from shoal._api.image.layers import (
    LAYER_TYPES,
    AptPackages,
    Commands,
    EnvVars,
    Layer,
    PipPackages,
    PythonWheels,
    Requirements,
    SourceFile,
    SourceFolder,
    WorkDir,
    context_name,
)
from shoal._api.image.script import check_requires_python, pick_python, read_script_block
from shoal._api.image.shoal_package import SHOAL_SOURCE_CONTEXT, shoal_install_lines, shoal_source
from shoal._runtime.packages import applies_here, parse_requirement, unmet
from shoal.errors import SpecError

__all__ = [
    "DEBIAN_BASE_IMAGE",
    "DEFAULT_IMAGE_NAME",
    "Image",
    "missing_locally",
]

# The base image of ``from_debian_base``; {python_version} is "3.11" and the like.
DEBIAN_BASE_IMAGE = "python:{python_version}-slim-bookworm"
TAG_LENGTH = 16


# --- the image -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Image:
    """A container-image recipe. Build it with ``from_debian_base``, ``from_base`` or
    ``from_uv_script``; derive others with the ``with_*`` methods and ``clone``.

    ``name`` is the repository the image is pushed to (``registry/name:tag``); ``install_shoal``
    adds the Shoal package (``shoal_package.py``) right after the base, which pods need
    for the node launcher.
    """

    base_image: str
    python_version: str | None = None
    name: str = DEFAULT_IMAGE_NAME
    registry: str | None = None
    install_shoal: bool = True
    workdir: str | None = None  # the base's WORKDIR, set before Shoal is installed
    layers: tuple[Layer, ...] = ()
    extendable: bool = True  # False: a sealed image, layers refused (clone(extendable=True))

    def __post_init__(self) -> None:
        check_image_ref("base_image", self.base_image)
        if self.python_version is not None:
            object.__setattr__(self, "python_version", check_python_version(self.python_version))
        check_repository(self.name)
        if self.registry is not None:
            check_registry("registry", self.registry)
        if not isinstance(self.install_shoal, bool):
            raise SpecError("install_shoal", self.install_shoal, "must be a bool", "use True")
        if self.workdir is not None:
            check_workdir("workdir", self.workdir)
        if not isinstance(self.extendable, bool):
            raise SpecError("extendable", self.extendable, "must be a bool", "use True")
        if not isinstance(self.layers, tuple) or not all(
            isinstance(layer, LAYER_TYPES) for layer in self.layers
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
        install_flyte: bool | None = None,
        flyte_version: str | None = None,
        registry_secret: object = None,
        platform: str | tuple[str, ...] | None = None,
    ) -> Image:
        """A slim Debian image with CPython ``python_version`` ("3.11"; default: this one's).

        ``install_flyte`` is Flyte 2's name for ``install_shoal`` (code ported from Flyte
        passes it); ``flyte_version``, ``registry_secret`` and ``platform`` are refused with
        what to do instead.
        """
        if install_flyte is not None:
            if not install_shoal and install_flyte:
                raise SpecError("install_flyte", install_flyte, "contradicts install_shoal=False",
                                "pass only one of them")
            install_shoal = install_flyte
        if flyte_version is not None:
            raise SpecError("from_debian_base(flyte_version)", flyte_version,
                            "Shoal images carry the Shoal that runs here (the same version)",
                            "drop flyte_version")
        _refuse_unsupported("from_debian_base", registry_secret, platform)
        if python_version is None:
            version = f"{sys.version_info.major}.{sys.version_info.minor}"
        else:  # "3.11", or (3, 11) as Flyte 2 spells it
            version = check_python_version(python_version)
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
        check_image_ref("image_uri", image_uri)
        return cls(
            base_image=image_uri,
            name=DEFAULT_IMAGE_NAME if name is None else name,
            registry=registry,
            install_shoal=install_shoal,
        )

    @classmethod
    def from_uv_script(
        cls,
        script: str | os.PathLike[str],
        *,
        name: str,
        registry: str | None = None,
        python_version: str | tuple[int, int] | None = None,
        index_url: str | None = None,
        extra_index_urls: str | Sequence[str] | None = None,
        pre: bool = False,
    ) -> Image:
        """A Debian image with the packages of ``script``'s PEP 723 block (``# /// script``).

        ``requires-python`` must allow ``python_version``; without one the image gets this
        interpreter's Python if the block allows it, else the oldest it allows (as uv picks).
        A ``flyte`` dependency is not installed: Shoal, which every Shoal image carries, stands
        in for it in code ported from Flyte. The block is read here, once.
        """
        path = local_path("from_uv_script", script)
        block = read_script_block(path)
        if python_version is None:
            python_version = pick_python(block)
        image = cls.from_debian_base(python_version, name=name, registry=registry)
        check_requires_python(block, path, image.python_version or "")
        deps = tuple(d for d in block.dependencies
                     if normalize_name(requirement_name(d) or "") != FLYTE_PACKAGE)
        if not deps:
            return image
        return image.with_pip_packages(*deps, index_url=index_url,
                                       extra_index_urls=extra_index_urls, pre=pre)

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
        checked = tuple(check_requirement(p) for p in packages)
        extras = check_pip_options("with_pip_packages", index_url, extra_index_urls, pre)
        return self._add(PipPackages(checked, index_url, extras, pre))

    def with_apt_packages(self, *packages: str) -> Image:
        """Add ``apt-get install`` of Debian ``packages`` ("git", "curl", "libaio-dev")."""
        if not packages:
            raise SpecError(
                "with_apt_packages", packages, "needs at least one package",
                'pass names such as with_apt_packages("git", "curl")',
            )
        return self._add(AptPackages(tuple(check_apt(p) for p in packages)))

    def with_requirements(self, file: str | os.PathLike[str]) -> Image:
        """Add ``pip install -r`` of a local requirements file (its bytes go into the tag).

        A ``-r other.txt`` line inside it is read for ``declared_pip_packages`` but not copied
        into the image; list each file with its own ``with_requirements``.
        """
        return self._add(Requirements(local_path("with_requirements", file)))

    def with_env_vars(self, env_vars: Mapping[str, str]) -> Image:
        """Set environment variables in the image (``ENV``), in sorted order."""
        return self._add(EnvVars(check_env_vars(env_vars)))

    def with_commands(self, *commands: str | Sequence[str]) -> Image:
        """Add ``RUN`` lines, one per command; a list is taken as several (Flyte 2's shape)."""
        return self._add(Commands(check_commands(commands)))

    def with_workdir(self, path: str) -> Image:
        """Set the working directory (``WORKDIR``); an absolute path such as "/app"."""
        return self._add(WorkDir(check_workdir("with_workdir", path)))

    def with_source_folder(
        self, src: str | os.PathLike[str], dst: str = ".", *, copy_contents_only: bool = False
    ) -> Image:
        """Copy a local folder to ``dst/<folder name>`` (or its contents into ``dst``).

        ``dst`` is relative to the image's working directory unless absolute. Caches and VCS
        folders (``IGNORED_NAMES``) are left out, of the image and of the tag.
        """
        path = local_path("with_source_folder", src)
        dst = check_dst("with_source_folder", dst)
        return self._add(SourceFolder(path, dst, copy_contents_only))

    def with_source_file(self, src: str | os.PathLike[str], dst: str = ".") -> Image:
        """Copy a local file into the folder ``dst`` (keeping its name)."""
        path = local_path("with_source_file", src)
        return self._add(SourceFile(path, check_dst("with_source_file", dst)))

    def clone(
        self,
        registry: str | None = None,
        registry_secret: object = None,
        name: str | None = None,
        base_image: str | None = None,
        python_version: str | tuple[int, int] | None = None,
        addl_layer: Layer | None = None,
        extendable: bool | None = None,
        platform: str | tuple[str, ...] | None = None,
    ) -> Image:
        """A copy with a new name, registry, base, Python or ``extendable``, plus ``addl_layer``
        (a layer such as ``PythonWheels``) at the end; arguments left None keep this image's.

        ``python_version`` on an image from ``from_debian_base`` also moves its base to that
        Python. ``extendable=False`` seals the copy: layers added to it later are refused.
        """
        _refuse_unsupported("clone", registry_secret, platform)
        changes: dict[str, object] = {}
        if python_version is not None:
            version = check_python_version(python_version)
            changes["python_version"] = version
            if base_image is None and self.python_version is not None and (
                    self.base_image == DEBIAN_BASE_IMAGE.format(
                        python_version=self.python_version)):
                changes["base_image"] = DEBIAN_BASE_IMAGE.format(python_version=version)
        if base_image is not None:
            changes["base_image"] = base_image
        if name is not None:
            changes["name"] = name
        if registry is not None:
            changes["registry"] = registry
        img = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        if addl_layer is not None:
            if not isinstance(addl_layer, LAYER_TYPES):
                raise SpecError("clone(addl_layer)", addl_layer, "must be an image layer",
                                "pass a layer such as PythonWheels(wheel_dir=..., "
                                "package_name=...), or use the with_* methods")
            img = img._add(addl_layer)
        if extendable is not None:
            img = dataclasses.replace(img, extendable=extendable)
        return img

    def with_local_v2(self) -> Image:
        """Flyte 2's "carry the local SDK build": this image with ``install_shoal=True``, which
        copies in the Shoal that runs here (its source tree when it runs from one)."""
        return dataclasses.replace(self, install_shoal=True)

    def with_local_v2_plugins(self, plugins: str | Sequence[str] | None = None) -> Image:
        """Flyte 2's "carry these local plugin builds" (``["flyteplugins-nsight"]``): Shoal's
        plugins are part of Shoal, so this is ``with_local_v2()``. Each name is checked: one
        that is not ``flyteplugins-<name>`` is refused."""
        names = [plugins] if isinstance(plugins, str) else list(plugins or [])
        for name in names:
            if not isinstance(name, str) or not name.startswith("flyteplugins-"):
                raise SpecError("with_local_v2_plugins", name, "a plugin is named "
                                "flyteplugins-<name>", 'e.g. ["flyteplugins-nsight"]')
        return self.with_local_v2() if names else self

    def _add(self, layer: Layer) -> Image:
        if not self.extendable:
            raise SpecError("extendable", False, "this image was sealed with "
                            "clone(extendable=False): no layers can be added to it",
                            "add layers before sealing it, or clone(extendable=True)")
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
            lines += shoal_install_lines()
        for i, layer in enumerate(self.layers):
            lines += layer.render(context_name(i, layer))
        return "\n".join(lines) + "\n"

    def context_sources(self) -> dict[str, Path]:
        """Build-context path (as the Dockerfile names it) -> local path, for every copy."""
        return {ctx: path for ctx, path, _ in self._local_copies()}

    def _local_copies(self) -> list[tuple[str, Path, str]]:
        """(build-context path, local path, builder name) for every layer that copies files."""
        out: list[tuple[str, Path, str]] = []
        source = shoal_source() if self.install_shoal else None
        if source is not None:
            out.append((SHOAL_SOURCE_CONTEXT, source, "shoal"))
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Requirements):
                out.append((context_name(i, layer), layer.path, "with_requirements"))
            elif isinstance(layer, SourceFolder):
                out.append((context_name(i, layer), layer.src, "with_source_folder"))
            elif isinstance(layer, SourceFile):
                out.append((context_name(i, layer), layer.src, "with_source_file"))
            elif isinstance(layer, PythonWheels):
                out.append((context_name(i, layer), layer.wheel_dir, "PythonWheels"))
        return out

    @property
    def tag(self) -> str:
        """A content hash of the Dockerfile and every local file it copies (re-read each time)."""
        digest = hashlib.sha256()
        feed(digest, b"shoal-image-v1")
        feed(digest, self.dockerfile().encode())
        for ctx, path, builder in self._local_copies():
            feed(digest, ctx.encode())
            if builder == "PythonWheels" and not path.is_dir():
                # Not built yet (a ported file's dist/ on a laptop): the local engine still needs
                # a tag; write_build_context refuses the folder.
                feed(digest, b"no-wheel-folder")
                continue
            for kind, rel, payload in walk(path, builder):
                feed(digest, kind.encode())
                feed(digest, rel.encode())
                if kind == "F":
                    feed_file(digest, payload)
                elif kind == "L":
                    feed(digest, str(payload).encode())
        return digest.hexdigest()[:TAG_LENGTH]

    def uri(self, registry: str | None = None) -> str:
        """``registry/name:tag`` (``registry`` overrides the image's own, which overrides
        ``$SHOAL_IMAGE_REGISTRY``, the config file's ``image.registry``), or the base as-is."""
        if not self.needs_build:
            return self.base_image
        reg = self.registry if registry is None else check_registry("registry", registry)
        if reg is None and os.environ.get(contract.IMAGE_REGISTRY):
            reg = check_registry(contract.IMAGE_REGISTRY, os.environ[contract.IMAGE_REGISTRY])
        ref = f"{self.name}:{self.tag}"
        return f"{reg.rstrip('/')}/{ref}" if reg else ref

    def write_build_context(self, dest: str | os.PathLike[str]) -> Path:
        """Write the Dockerfile and every copied file under ``dest``; return ``dest``.

        ``docker build dest`` then builds exactly what ``tag`` hashed (same ignore rules).
        """
        for layer in self.layers:
            if isinstance(layer, PythonWheels):
                check_wheels_present(layer)
        root = Path(dest)
        root.mkdir(parents=True, exist_ok=True)
        (root / "Dockerfile").write_text(self.dockerfile())
        for ctx, path, builder in self._local_copies():
            for kind, rel, payload in walk(path, builder):
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

    def declared_pip_requirements(self) -> list[str]:
        """The pip requirements this image installs (packages, requirements files, wheels), as
        PEP 508 strings with their extras, specifiers and markers; a URL by the name its
        ``#egg=`` gives, a URL without one left out. Reads the requirements files."""
        found: list[str] = []
        for layer in self.layers:
            if isinstance(layer, PipPackages):
                found += [p if parse_requirement(p) is not None else n
                          for p in layer.packages if (n := requirement_name(p))]
            elif isinstance(layer, Requirements):
                found += read_requirements(layer.path, "with_requirements")
            elif isinstance(layer, PythonWheels) and layer.package_name != FLYTE_PACKAGE:
                found.append(layer.package_name)
        return list(dict.fromkeys(found))

    def declared_pip_packages(self) -> list[str]:
        """Distribution names of the requirements that apply to this interpreter (a
        requirement whose marker is false here, ``pywin32; sys_platform == "win32"`` on Linux,
        is left out). Reads the requirements files."""
        names: list[str] = []
        for text in self.declared_pip_requirements():
            req = parse_requirement(text)
            if req is not None and applies_here(req):
                names.append(req.name)
        return list(dict.fromkeys(names))


def _refuse_unsupported(builder: str, registry_secret: object, platform: object) -> None:
    if registry_secret is not None:
        raise SpecError(f"{builder}(registry_secret)", registry_secret,
                        "Shoal does not push or pull with a per-image secret",
                        "log in with `docker login` before `shoal image build --push`; "
                        "give pods a pull secret with PodTemplate")
    if platform is not None:
        raise SpecError(f"{builder}(platform)", platform, "Shoal builds for the build "
                        "machine's platform", "build other platforms with docker buildx from "
                        "the context `shoal image build --out DIR` writes")


# A ported file's wheels of Flyte itself: locally Shoal stands in for it, so it is not "missing".
FLYTE_PACKAGE = "flyte"


def check_wheels_present(layer: PythonWheels) -> None:
    """Refuse to build a ``PythonWheels`` layer whose folder holds no wheel of its package."""
    want = normalize_name(layer.package_name)
    if want == FLYTE_PACKAGE and not layer.wheel_dir.is_dir():
        wheels = []
    else:
        wheels = [w for _, _, w in walk(layer.wheel_dir, "PythonWheels") if isinstance(w, Path)
                  and w.suffix == ".whl"]
    if any(normalize_name(w.name.split("-")[0]) == want for w in wheels):
        return
    if not layer.wheel_dir.is_dir():
        rule = f"its wheel_dir {layer.wheel_dir} does not exist"
    else:
        found = ", ".join(w.name for w in wheels) or "no wheels"
        rule = f"{layer.wheel_dir} holds {found}, none of this package"
    if want == FLYTE_PACKAGE:
        fix = ("this is code ported from Flyte: Shoal's images already install Shoal, which "
               "stands in for flyte, so drop the PythonWheels(package_name='flyte') layer")
    else:
        fix = (f"build {layer.package_name}'s wheel into {layer.wheel_dir} "
               "(python -m build --wheel --outdir ...), or fix package_name")
    raise SpecError("PythonWheels(package_name)", layer.package_name, rule, fix)


def missing_locally(image: Image) -> list[str]:
    """Declared pip requirements the running interpreter does not meet (by metadata, no
    imports): see `shoal._runtime.packages.unmet`."""
    return unmet(image.declared_pip_requirements())
