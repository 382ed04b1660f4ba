"""The config file of `shoal.init_from_config()`: Shoal's settings, and Flyte's where they map.

Which file (the first found wins; none found: the local engine and the defaults, silently):

1. the path passed to ``init_from_config`` (relative to ``root_dir`` if given): must exist;
2. ``$SHOAL_CONFIG``: must exist;
3. ``./.shoal/config.yaml``, then ``<git root>/.shoal/config.yaml``;
4. ``$SHOAL_HOME/config.yaml`` (``~/.shoal/config.yaml``);
5. Flyte's places: ``./.flyte/config.yaml``, ``<git root>/.flyte/config.yaml``,
   ``$UCTL_CONFIG``, ``$FLYTECTL_CONFIG``, ``~/.union/config.yaml``, ``~/.flyte/config.yaml``.

Flyte also reads a bare ``./config.yaml``; Shoal does not guess it (the name is as likely a
training config), it reads it when passed explicitly. "." is ``root_dir`` when given.

What a file holds (YAML; every key optional; relative paths are relative to the file)::

    engine: local                  # where runs started from Python run: local, kubernetes, slurm
    kube_settings: kube.yaml       # the Kubernetes engine's settings (KubeConfig fields)
    slurm_settings: slurm.yaml     # the Slurm engine's settings (partition, account...)
    store: s3://bucket/prefix      # the object-store root (default file://<home>/store)
    home: ~/.shoal                 # run records and logs
    ui_url: http://127.0.0.1:8484  # the base of Run.url (`shoal ui`)
    containers: true               # local tasks run inside their images (`shoal run --containers`)
    image:
      registry: ghcr.io/my-org     # Flyte's key too: images that name no registry
      builder: podman              # Flyte's key: local (the first present) or docker, podman,
                                   # buildah (SHOAL_IMAGE_BUILDER); images build on this machine
    task: {org: o, project: p, domain: d}   # Flyte's: recorded as labels of every run
    admin: {endpoint: dns:///x}    # Flyte's control plane: a warning, runs stay on Shoal
    console: {endpoint: https://x} # Flyte's console: a warning, pages are in `shoal ui`
    local: {persistence: true}     # Flyte's: Shoal always records runs
    logger: {level: 0}             # flytectl's: a warning, not used

A key Shoal does not know is an error that names the file, the key and the nearest known key.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._driver.engine_choice import check_engine
from shoal.errors import SpecError

FILE_NAME = "config.yaml"
# Flyte's image.builder for "build on this machine": here, with the first builder present.
FLYTE_LOCAL_BUILDER = "local"
# Flyte's own variables naming a config file (read, never written).
FLYTE_CONFIG_VARS = ("UCTL_CONFIG", "FLYTECTL_CONFIG")

_TOP = ("engine", "store", "home", "kube_settings", "slurm_settings", "ui_url", "image", "task",
        "admin", "console", "local", "logger", "containers")
_SECTIONS: dict[str, tuple[str, ...]] = {
    "image": ("registry", "builder", "image_refs"),
    "task": ("org", "project", "domain"),
    "local": ("persistence", "tracked", "tracked_strict"),
    "console": ("endpoint",),
}


@dataclass(frozen=True)
class Settings:
    """What a config file asks for, validated; `None` leaves the current choice."""

    source: Path | None = None
    engine: str = "local"
    store: str | None = None
    home: str | None = None
    kube_settings: str | None = None
    slurm_settings: str | None = None
    ui_url: str | None = None
    image_registry: str | None = None
    containers: bool | None = None  # None: as SHOAL_CONTAINERS says
    image_builder: str | None = None  # None: the first builder present (Flyte's "local")
    labels: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # one-line warnings for keys Shoal reads but cannot honour


def _git_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def candidates(root: Path) -> list[Path]:
    """Every place searched when no path is given, in order (see the module docstring)."""
    git = _git_root(root)
    out: list[Path] = [root / ".shoal" / FILE_NAME]
    if git is not None and git != root:
        out.append(git / ".shoal" / FILE_NAME)
    out.append(contract.home() / FILE_NAME)
    out.append(root / ".flyte" / FILE_NAME)
    if git is not None and git != root:
        out.append(git / ".flyte" / FILE_NAME)
    out += [Path(os.environ[v]).expanduser() for v in FLYTE_CONFIG_VARS if os.environ.get(v)]
    out += [Path.home() / ".union" / FILE_NAME, Path.home() / ".flyte" / FILE_NAME]
    return out


def find(path: str | os.PathLike[str] | None, root_dir: Path | None = None) -> Path | None:
    """The config file to read, or None (see the module docstring for the order)."""
    root = (root_dir or Path.cwd()).expanduser()
    if path is not None:
        given = root / Path(path).expanduser() if root_dir else Path(path).expanduser()
        if not given.is_file():
            raise SpecError("init_from_config(path_or_config=...)", str(path),
                            f"no such file ({given.resolve()})",
                            "pass the path of a config file, or nothing to search the "
                            f"usual places ({contract.CONFIG}, ./.shoal/config.yaml, ...)")
        return given
    named = os.environ.get(contract.CONFIG)
    if named:
        if not Path(named).expanduser().is_file():
            raise SpecError(contract.CONFIG, named, "no such file",
                            f"point {contract.CONFIG} at a config file, or unset it")
        return Path(named).expanduser()
    return next((p for p in candidates(root) if p.is_file()), None)


def load(path: Path) -> Settings:
    """Read and validate one config file."""
    import yaml  # lazily: `import shoal` stays light

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise SpecError(str(path), "", f"is not valid YAML: {e}".replace("\n", " "),
                        "fix the file's syntax") from e
    except OSError as e:
        raise SpecError(str(path), "", f"cannot be read: {e}", "check the path") from e
    if not isinstance(data, dict):
        raise SpecError(str(path), data, "must hold a mapping of settings",
                        "e.g. engine: local\\nstore: s3://bucket/prefix")
    return _Reader(path).read(data)


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.notes: list[str] = []

    def error(self, key: str, value: object, rule: str, fix: str) -> SpecError:
        return SpecError(f"{self.path}: {key}", value, rule, fix)

    def note(self, key: str, value: object, what_shoal_does: str) -> None:
        self.notes.append(f"{self.path}: {key}={value!r}: {what_shoal_does}")

    def check_keys(self, where: str, data: Mapping[Any, Any], known: tuple[str, ...]) -> None:
        for key in data:
            if key not in known:
                near = difflib.get_close_matches(str(key), known, n=1)
                name = f"{where}.{key}" if where else str(key)
                raise self.error(name, data[key], "is not a Shoal or Flyte setting",
                                 f"did you mean {near[0]!r}?" if near else
                                 f"use one of: {', '.join(known)}")

    def string(self, key: str, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, value, "must be a non-empty string", "quote the value")
        return value.strip()

    def section(self, key: str, value: object) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.error(key, value, "must be a mapping",
                             f"indent its settings under {key}:")
        return value

    def read(self, data: Mapping[str, Any]) -> Settings:
        self.check_keys("", data, _TOP)
        for name, known in _SECTIONS.items():
            if name in data:
                self.check_keys(name, self.section(name, data[name]), known)
        out: dict[str, Any] = {"source": self.path, "labels": {}}
        if "engine" in data:
            out["engine"] = self.engine(data["engine"])
        if "store" in data:
            out["store"] = self.store(data["store"])
        if "home" in data:
            home = Path(self.string("home", data["home"])).expanduser()
            out["home"] = str(home if home.is_absolute() else self.path.parent / home)
        for key in ("kube_settings", "slurm_settings"):
            if key in data:
                settings = Path(self.string(key, data[key])).expanduser()
                out[key] = str(settings if settings.is_absolute()
                               else self.path.parent / settings)
        if "ui_url" in data:
            url = self.string("ui_url", data["ui_url"])
            if not url.startswith(("http://", "https://")):
                raise self.error("ui_url", url, "must be an http:// or https:// URL",
                                 f"use http://127.0.0.1:{contract.DEFAULT_UI_PORT}")
            out["ui_url"] = url.rstrip("/")
        if "containers" in data:
            if not isinstance(data["containers"], bool):
                raise self.error("containers", data["containers"], "must be true or false",
                                 "containers: true runs each local task inside its image")
            out["containers"] = data["containers"]
        out["image_registry"], out["image_builder"] = self.image(data.get("image") or {})
        for key, value in (data.get("task") or {}).items():
            if value is not None:
                out["labels"][key] = self.string(f"task.{key}", value)
        self.flyte_only(data)
        return Settings(**out, notes=tuple(self.notes))

    def engine(self, value: object) -> str:
        try:
            return check_engine("engine", value)
        except SpecError as e:
            raise self.error("engine", value, e.rule, e.fix or "") from e

    def store(self, value: object) -> str:
        from shoal._storage.store import open_store

        uri = self.string("store", value)
        if "://" not in uri:  # a plain folder, relative to the file
            folder = Path(uri).expanduser()
            uri = (folder if folder.is_absolute() else self.path.parent / folder).resolve().as_uri()
        try:
            open_store(uri)
        except SpecError as e:
            raise self.error("store", value, e.rule, e.fix or "") from e
        return uri

    def image(self, section: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """(registry, builder) of the ``image:`` section."""
        from shoal._api.image import check_registry
        from shoal._engines.images import BUILDERS, check_builder

        builder = section.get("builder")
        if builder == FLYTE_LOCAL_BUILDER:
            builder = None
        elif builder is not None:
            try:
                builder = check_builder("image.builder", builder)
            except SpecError as e:
                raise self.error("image.builder", builder, "Shoal builds images on this "
                                 "machine (`shoal image build`): the builder is local, or one "
                                 f"of {', '.join(b.name for b in BUILDERS)}",
                                 e.fix or "") from e
        if section.get("image_refs"):
            raise self.error("image.image_refs", section["image_refs"], "Shoal has no named "
                             "image references", "give the image to the environment: "
                             "TaskEnvironment(image='ghcr.io/org/img:tag')")
        registry = section.get("registry")
        if registry is None:
            return None, builder
        try:
            return check_registry("image.registry", registry), builder
        except SpecError as e:
            raise self.error("image.registry", registry, e.rule, e.fix or "") from e

    def flyte_only(self, data: Mapping[str, Any]) -> None:
        """Flyte's keys that only make sense with a Flyte control plane: one line each."""
        admin = data.get("admin")
        if admin:
            shown = admin.get("endpoint") if isinstance(admin, dict) else admin
            self.note("admin.endpoint" if isinstance(admin, dict) and "endpoint" in admin
                      else "admin", shown, "a Flyte control plane, which Shoal does not use: "
                      "runs start on Shoal's local engine")
        console = data.get("console") or {}
        if console.get("endpoint"):
            self.note("console.endpoint", console["endpoint"], "a Flyte console; run pages "
                      "are in `shoal ui` (set ui_url: to move them)")
        local = data.get("local") or {}
        if local.get("persistence") is False:
            self.note("local.persistence", False, "Shoal always records runs (shoal runs)")
        for key in ("tracked", "tracked_strict"):
            if local.get(key):
                self.note(f"local.{key}", local[key], "no Flyte control plane to report to; "
                          "runs are recorded locally (shoal runs, shoal ui)")
        if data.get("logger"):
            self.note("logger", data["logger"], "flytectl's log settings are not used; pass "
                      "log_level= to init_from_config or with_runcontext")


def configured_image_builder() -> str | None:
    """The builder the config file found from here names (``image.builder``), or None."""
    path = find(None)
    return load(path).image_builder if path is not None else None
