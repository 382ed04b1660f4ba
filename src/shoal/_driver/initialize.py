"""`shoal.init()` and `shoal.init_from_config()`: the engine, store and home of the runs this
process starts. Child processes inherit the choice through the environment contract."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._driver import handle
from shoal._driver.engine_choice import check_containers, check_engine, is_remote
from shoal._driver.syncaio import SyncAio
from shoal.errors import SpecError


def init(*, engine: str = "local", store: str | None = None, home: str | None = None,
         kube_settings: str | os.PathLike[str] | None = None,
         slurm_settings: str | os.PathLike[str] | None = None,
         containers: bool | None = None) -> None:
    """Choose the engine and the object store for runs started from this process.

    ``engine`` is one of ``contract.ENGINES`` ("local", "kubernetes", "slurm"), as for ``shoal run
    --engine``. ``store`` is a root URI (``file:///path``, ``s3://bucket/prefix``,
    ``gs://bucket``); the default is ``file://$SHOAL_HOME/store``. ``kube_settings`` is the
    Kubernetes engine's settings file (``shoal run --kube-settings``). With
    ``engine="kubernetes"`` the settings and the store are checked here; `shoal.run` then
    submits the run's driver Job. ``slurm_settings`` is the Slurm engine's settings file
    (``shoal run --slurm-settings``), checked here. ``containers=True`` runs the local
    engine's tasks inside their images (``shoal run --containers``; podman), False in this
    interpreter; None leaves the choice as it is. Child processes inherit the choice.
    """
    check_engine("init(engine=...)", engine)
    if containers is not None and not isinstance(containers, bool):
        raise SpecError("init(containers=...)", containers, "must be True or False",
                        "containers=True runs each local task inside its image")
    check_containers(engine, containers)
    # A refused init chooses nothing: what it set before the refusal is put back.
    chosen = (contract.HOME, contract.STORE, contract.KUBE_SETTINGS, contract.SLURM_SETTINGS,
              contract.ENGINE, contract.CONTAINERS)
    before = {name: os.environ.get(name) for name in chosen}
    try:
        _choose(engine, store, home, kube_settings, slurm_settings)
        if containers is not None:
            os.environ[contract.CONTAINERS] = "1" if containers else "0"
    except BaseException:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        raise


def _choose(engine: str, store: str | None, home: str | None,
            kube_settings: str | os.PathLike[str] | None,
            slurm_settings: str | os.PathLike[str] | None) -> None:
    if home is not None:
        os.environ[contract.HOME] = os.path.abspath(os.path.expanduser(home))
    if store is not None:
        from shoal._storage.store import open_store

        open_store(store)  # validates the URI now, not at the first write
        os.environ[contract.STORE] = store
    if kube_settings is not None:
        path = Path(kube_settings).expanduser()
        if not path.is_file():
            raise SpecError("init(kube_settings=...)", str(kube_settings), "no such file",
                            "pass the path of a YAML file of KubeConfig fields")
        os.environ[contract.KUBE_SETTINGS] = str(path.resolve())
    if slurm_settings is not None:
        from shoal._engines.slurm.config import load_settings

        path = Path(slurm_settings).expanduser()
        load_settings(str(path), "init(slurm_settings=...)", "")  # a bad file fails here
        os.environ[contract.SLURM_SETTINGS] = str(path.resolve())
    if is_remote(engine):
        from shoal._driver.remote import driver_for

        driver_for(engine)  # a bad setting or a file:// store fails here, not at run()
    os.environ[contract.ENGINE] = engine


def check_settings(*, slurm_settings: str | None, field: str) -> None:
    """An engine's settings file checked before `init` checks it, so a bad one is named as
    the caller gave it (``field``: ``--slurm-settings``)."""
    if slurm_settings:
        from shoal._engines.slurm.config import load_settings

        load_settings(slurm_settings, field, "")


def refuse_unless(call: str, name: str, value: object, default: object, rule: str,
                  fix: str) -> None:
    """A Flyte parameter Shoal cannot honour: accepted at its default only."""
    if value != default:
        raise SpecError(f"{call}({name}=...)", value, rule, fix)


def _level(call: str, name: str, level: int | str) -> int:
    from shoal._api.logger import parse_level

    value = parse_level(level)
    if value is None:
        raise SpecError(f"{call}({name}=...)", level, "must be a logging level",
                        "use logging.DEBUG, logging.INFO, or a name such as 'INFO'")
    return value


def set_log_level(call: str, level: int | str | None) -> None:
    """Flyte's ``log_level``: the level of Shoal's own logger ("shoal") in this process and
    its task processes (``SHOAL_LOG_LEVEL``)."""
    if level is None:
        return
    value = _level(call, "log_level", level)
    logging.getLogger("shoal").setLevel(value)
    os.environ[contract.LOG_LEVEL] = str(value)


def set_user_log_level(call: str, level: int | str | None) -> None:
    """Flyte's ``user_log_level``: the level of `shoal.logger`, here and in task processes."""
    if level is None:
        return
    from shoal._api import logger

    logger.set_level(_level(call, "user_log_level", level))


def _init_from_config(path_or_config: str | os.PathLike[str] | None = None,
                      root_dir: str | os.PathLike[str] | None = None,
                      log_level: int | str | None = None, log_format: str = "console",
                      user_log_level: int | str | None = None, org: str | None = None,
                      project: str | None = None, domain: str | None = None,
                      storage: str | None = None, batch_size: int = 1000,
                      image_builder: str | None = None, images: Any = None,
                      sync_local_sys_paths: bool = True) -> None:
    """Set up this process from a config file, the way Flyte's ``init_from_config`` does.

    With no path, the file is searched for (``$SHOAL_CONFIG``, ``./.shoal/config.yaml``,
    ``~/.shoal/config.yaml``, then Flyte's places; see `shoal._driver.config`); with none
    found, runs use the local engine and the defaults, and nothing is printed. Flyte's keys
    that need a Flyte control plane (``admin.endpoint``...) print one warning line each.
    ``storage`` is a store URI here (Flyte: a storage object); ``org``/``project``/``domain``
    become labels of every run.
    """
    from shoal._driver import config

    call = "init_from_config"
    if path_or_config is not None and not isinstance(path_or_config, str | os.PathLike):
        raise SpecError(f"{call}(path_or_config=...)", path_or_config,
                        "must be the path of a config file", "pass a path, or nothing")
    refuse_unless(call, "log_format", log_format, "console", "Shoal's logs are plain lines",
                  "leave log_format out")
    refuse_unless(call, "batch_size", batch_size, 1000, "it sizes a Flyte control plane's "
                  "listings; Shoal reads its records locally", "leave batch_size out")
    if image_builder is not None and image_builder != config.FLYTE_LOCAL_BUILDER:
        from shoal._engines.images import BUILDERS, check_builder

        try:
            check_builder(f"{call}(image_builder=...)", image_builder)
        except SpecError as e:
            raise SpecError(e.field, image_builder, "Shoal builds images on this machine "
                            "(`shoal image build`): 'local' (the first builder present) or "
                            f"one of {', '.join(b.name for b in BUILDERS)}",
                            e.fix) from e
    refuse_unless(call, "images", images or None, None, "Shoal has no named image "
                  "references", "give the image to the environment: "
                  "TaskEnvironment(image='ghcr.io/org/img:tag')")
    refuse_unless(call, "sync_local_sys_paths", sync_local_sys_paths, True, "Shoal's tasks "
                  "import your code from its folder, locally and in its code bundle",
                  "leave sync_local_sys_paths out")
    if storage is not None and not isinstance(storage, str):
        raise SpecError(f"{call}(storage=...)", storage, "must be a store URI",
                        "pass storage='s3://bucket/prefix', or set store: in the config file")
    root = Path(root_dir) if root_dir is not None else None
    path = config.find(path_or_config, root)
    settings = config.load(path) if path is not None else config.Settings()
    for note in settings.notes:
        print(f"shoal: warning: {note}", file=sys.stderr, flush=True)
    init(engine=settings.engine, store=storage or settings.store, home=settings.home,
         kube_settings=settings.kube_settings, slurm_settings=settings.slurm_settings,
         containers=settings.containers)
    if settings.ui_url:
        os.environ[contract.UI_URL] = settings.ui_url
    if settings.image_registry:
        os.environ[contract.IMAGE_REGISTRY] = settings.image_registry
    builder = image_builder if image_builder not in (None, config.FLYTE_LOCAL_BUILDER) \
        else settings.image_builder
    if builder:
        os.environ[contract.IMAGE_BUILDER] = builder
    labels = dict(settings.labels)
    for key, value in (("org", org), ("project", project), ("domain", domain)):
        if value is not None:
            labels[key] = str(value)
    handle.DEFAULT_LABELS.clear()
    handle.DEFAULT_LABELS.update(labels)
    set_log_level(call, log_level)
    set_user_log_level(call, user_log_level)


async def _init_from_config_aio(*args: Any, **kwargs: Any) -> None:
    _init_from_config(*args, **kwargs)


init_from_config = SyncAio(_init_from_config, _init_from_config_aio)
