"""Which of an image's pip requirements this interpreter does not meet.

Locally a task runs in the current interpreter, not in its image, so the local engine says what
the image declares and this interpreter lacks. Requirements are read with `packaging` (PEP 508):
one whose environment marker is false here (``pywin32; sys_platform == "win32"`` on Linux) is
not expected here; otherwise the distribution must be installed (by metadata, never by import),
its version must satisfy the requirement's specifiers, and the distributions its requested
extras pull in (``datasets[audio]``) must be installed too. A Flyte plugin Shoal ships as
``shoal.plugins.<name>`` (``flyteplugins-pytorch``, kept in a ported image) is met by Shoal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # both load when a check runs, not with `import shoal`
    from importlib.metadata import Distribution

    from packaging.requirements import Requirement

__all__ = ["applies_here", "parse_requirement", "unmet"]


def parse_requirement(text: str) -> Requirement | None:
    """``text`` as a PEP 508 requirement, or None when it is not one (a bare URL, a typo)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def applies_here(req: Requirement) -> bool:
    """Whether the requirement's marker (if any) holds for this interpreter."""
    return req.marker is None or req.marker.evaluate({"extra": ""})


def _installed(name: str) -> Distribution | None:
    from importlib import metadata

    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _extra_needs(dist: Distribution, extras: Iterable[str]) -> list[Requirement]:
    """What the distribution requires for ``extras`` only (its base requirements excluded)."""
    needs: list[Requirement] = []
    for line in dist.requires or []:
        dep = parse_requirement(line)
        if dep is None or dep.marker is None or dep.marker.evaluate({"extra": ""}):
            continue
        if any(dep.marker.evaluate({"extra": extra}) for extra in extras):
            needs.append(dep)
    return needs


def _stood_in_by_shoal(name: str) -> bool:
    """Whether ``name`` is a Flyte plugin whose ``shoal.plugins`` counterpart is here."""
    import importlib.util
    import re

    plugin = re.fullmatch(r"flyteplugins[-_.]+([a-z0-9_]+)", name.lower())
    if plugin is None:
        return False
    try:
        return importlib.util.find_spec(f"shoal.plugins.{plugin[1]}") is not None
    except (ImportError, ValueError):
        return False


def _unmet_one(req: Requirement) -> str | None:
    dist = _installed(req.name)
    if dist is None:
        return req.name
    version = dist.version
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        return f"{req.name}{req.specifier} ({version} is installed)"
    for dep in _extra_needs(dist, req.extras):
        if _installed(dep.name) is None:
            return f"{req.name}[{','.join(sorted(req.extras))}] (its extra needs {dep.name})"
    return None


def unmet(requirements: Iterable[str]) -> list[str]:
    """Each requirement this interpreter does not meet, said the way a user fixes it: the
    name alone when it is missing, else what is wrong (version, an extra's dependency).
    ``requirements`` are PEP 508 strings (`Image.declared_pip_requirements`)."""
    out: list[str] = []
    for text in requirements:
        req = parse_requirement(text)
        if req is None or not applies_here(req) or _stood_in_by_shoal(req.name):
            continue
        if (problem := _unmet_one(req)) is not None:
            out.append(problem)
    return out
