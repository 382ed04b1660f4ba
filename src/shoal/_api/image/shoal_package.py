"""How Shoal itself gets into every image it builds (the node launcher lives in the package).

A Shoal installed from a package index is pip-installed by version (``shoal==<version>``),
and pip brings its dependencies. A Shoal that runs from a source tree, or was installed
from a local path or a VCS (PEP 610's ``direct_url.json``), is copied into the build
context instead, and its dependencies are installed by the list `runtime_requirements`
reads from the package's own ``pyproject.toml`` (the source tree's) or, without one, from
its installed metadata: the list cannot drift from what ``pip install shoal`` would bring.
The image keeps the list it installed beside the copy (`IMAGE_REQUIREMENTS`): a task inside
it that calls another computes that one's image tag, so the same Dockerfile must render
there, where neither a source tree nor metadata is.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from shoal._api.image.layers import PIP_INSTALL
from shoal._api.image.script import toml_module
from shoal.errors import SpecError

__all__ = ["IMAGE_EXTRAS", "SHOAL_INSTALL_TEMPLATE", "SHOAL_SOURCE_CONTEXT",
           "runtime_requirements", "shoal_install_lines", "shoal_requirement", "shoal_source"]

# {requirement} is ``shoal_requirement()``. To install from a private index or a wheel
# instead, change this one line; the tag follows, since it hashes the rendered text.
SHOAL_INSTALL_TEMPLATE = "RUN python -m pip install --no-cache-dir {requirement}"
# Where the Shoal package goes in a build context when it is copied in (see shoal_source).
SHOAL_SOURCE_CONTEXT = "_shoal_context/shoal"
# The extras every image carries besides Shoal's dependencies: s3 (obstore), so a pod
# reaches an s3:// or gs:// store.
IMAGE_EXTRAS = ("s3",)
_PACKAGE = Path(__file__).parents[2]  # shoal/, this file being shoal/_api/image/...
# Beside the copied package in an image (/opt/shoal/shoal): the requirements it installed.
IMAGE_REQUIREMENTS = "/opt/shoal/shoal-requirements.txt"


def shoal_source() -> Path | None:
    """The Shoal package folder to copy into images, when this Shoal cannot be pip-installed
    by version: it runs from a source tree, or was installed from a local path or a VCS.
    None when it came from a package index."""
    import importlib.metadata  # here: `import shoal` does not pay for it

    try:
        dist = importlib.metadata.distribution("shoal")
    except importlib.metadata.PackageNotFoundError:
        return _PACKAGE
    if dist.read_text("direct_url.json"):
        return _PACKAGE
    return None


def shoal_install_lines() -> list[str]:
    """The Dockerfile lines that put this Shoal into an image."""
    if shoal_source() is None:
        return [SHOAL_INSTALL_TEMPLATE.format(requirement=shoal_requirement())]
    deps = " ".join(shlex.quote(r) for r in runtime_requirements())
    return [f'COPY ["{SHOAL_SOURCE_CONTEXT}", "/opt/shoal/shoal/"]',
            "ENV PYTHONPATH=/opt/shoal",
            # Compiled once here, not at every start of a container (~0.1 s each).
            f"RUN {PIP_INSTALL} {deps} && printf '%s\\n' {deps} > {IMAGE_REQUIREMENTS} "
            "&& python -m compileall -q /opt/shoal/shoal"]


def shoal_requirement() -> str:
    """``shoal==<version running here>``, so pods run the Shoal that compiled their manifests."""
    import importlib.metadata

    try:
        return f"shoal=={importlib.metadata.version('shoal')}"
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "shoal"


def runtime_requirements(package: Path = _PACKAGE) -> list[str]:
    """What a copied Shoal needs to run: its dependencies and those of `IMAGE_EXTRAS`, as
    PEP 508 strings, one per distribution, from ``pyproject.toml`` beside the source tree
    that holds ``package`` (``src/shoal`` -> ``pyproject.toml``), else from the installed
    metadata."""
    pyproject = package.parent.parent / "pyproject.toml"
    project: dict[str, Any] = {}
    if pyproject.is_file():
        try:
            toml = toml_module(str(pyproject))
        except SpecError:  # Python 3.10 without tomli: the installed metadata, if any
            toml = None
        if toml is not None:
            with open(pyproject, "rb") as f:
                project = toml.load(f).get("project", {})
        if project.get("name") == "shoal":
            extras = project.get("optional-dependencies", {})
            return _one_each([*project.get("dependencies", []),
                              *(r for e in IMAGE_EXTRAS for r in extras.get(e, []))])
    recorded = package.parent / Path(IMAGE_REQUIREMENTS).name  # in an image: what it installed
    if recorded.is_file():
        return [line for line in recorded.read_text().splitlines() if line.strip()]
    import importlib.metadata

    try:
        requires = importlib.metadata.distribution("shoal").requires or []
    except importlib.metadata.PackageNotFoundError:
        raise SpecError("install_shoal", True, f"the Shoal at {package} has neither a "
                        "pyproject.toml beside its source tree nor installed metadata, so "
                        "its dependencies are unknown", "pip install the Shoal you run, or "
                        "run it from its source checkout") from None
    return _one_each(_metadata_requirements(requires))


def _metadata_requirements(requires: list[str]) -> list[str]:
    """Requires-Dist lines: the plain ones as they are, an extra's of `IMAGE_EXTRAS` without
    their ``extra == ...`` marker."""
    from packaging.requirements import Requirement

    out: list[str] = []
    for text in requires:
        req = Requirement(text)
        if req.marker is None or "extra" not in str(req.marker):
            out.append(text)
        elif any(req.marker.evaluate({"extra": e}) for e in IMAGE_EXTRAS):
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            out.append(f"{req.name}{extras}{req.specifier}")
    return out


def _one_each(requirements: list[str]) -> list[str]:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, str] = {}
    for text in requirements:
        seen.setdefault(canonicalize_name(Requirement(text).name), text)
    return list(seen.values())
