"""``wandb_config`` and ``wandb_sweep_config``: W&B settings that travel in the custom context.

Flyte 2 code writes ``flyte.with_runcontext(custom_context=wandb_config(project="p"))`` (the
whole run) or ``with wandb_config(tags=["x"]): await child()`` (the calls in the block). Either
way the settings become ``wandb_<field>`` keys of `shoal.custom_context` (``wandb_sweep_<field>``
for a sweep), strings as every custom context value is (lists, dicts and bools as JSON), so
they reach every task below, in whatever process or engine it runs. As in Flyte, a block sets
every field it has a value for, over the context around it (its ``run_mode="auto"`` and
``rank_scope="global"`` defaults too), and keeps the others. A ``@wandb_init`` task reads
them back with `get_wandb_context`; the decorator's own arguments win over them.

Each value is checked when the config is built: ``run_mode``, ``rank_scope`` and ``mode`` by
their sets of words, everything else by whether it can travel as JSON (a ``wandb.Settings``
object cannot: give it to ``@wandb_init(settings=...)`` instead).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

import shoal
from shoal.errors import SpecError

__all__ = ["RankScope", "RunMode", "WandbConfig", "WandbSweepConfig", "check_choice",
           "get_wandb_context", "get_wandb_sweep_context", "wandb_config", "wandb_sweep_config"]

RankScope = Literal["global", "worker"]
RunMode = Literal["auto", "new", "shared"]
RUN_MODES: tuple[str, ...] = get_args(RunMode)
RANK_SCOPES: tuple[str, ...] = get_args(RankScope)
# What wandb.init(mode=) takes ("dryrun" is W&B's old name for "offline").
WANDB_MODES = ("online", "offline", "disabled", "shared", "dryrun")

_WANDB, _SWEEP = "wandb", "wandb_sweep"
# Values that travel as JSON in the custom context, by field; the rest are plain strings.
_JSON_FIELDS = {"tags", "config", "download_logs", "kwargs", "metric", "parameters",
                "prior_runs"}


def check_choice(where: str, value: object, choices: tuple[str, ...], *,
                 optional: bool = False) -> None:
    """``value`` is one of ``choices`` (or None, when ``optional``), else a `SpecError`."""
    if (optional and value is None) or value in choices:
        return
    near = difflib.get_close_matches(str(value), choices, n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise SpecError(where, value, "must be one of " + ", ".join(repr(c) for c in choices)
                    + (" or None" if optional else ""), f"{hint}e.g. {choices[0]!r}")


def _check_json(where: str, value: object) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as e:
        raise SpecError(where, value, "must be JSON-serializable: the custom context carries "
                        f"strings to every task below ({e})",
                        "pass plain str/int/float/bool/list/dict values; give objects such as "
                        "wandb.Settings to @wandb_init(...) instead") from e


class _ContextConfig(Mapping[str, str]):
    """A config that is also the dict of custom-context keys it stands for (so
    ``custom_context=cfg`` and ``{**cfg, **other}`` work) and a ``with`` block that sets them
    for the calls made inside it."""

    _prefix = ""
    _blocks: list[AbstractContextManager[None]]

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name.startswith("_") or value is None:
                continue
            out[f"{self._prefix}_{f.name}"] = (json.dumps(value) if f.name in _JSON_FIELDS
                                               else str(value))
        return out

    def __getitem__(self, key: str) -> str:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __enter__(self) -> _ContextConfig:
        block = shoal.custom_context(**self.to_dict())
        block.__enter__()
        self._blocks.append(block)
        return self

    def __exit__(self, *exc: object) -> None:
        self._blocks.pop().__exit__(None, None, None)


def _read(cls: type[Any], prefix: str, context: Mapping[str, str]) -> Any:
    """The config of ``cls`` the ``<prefix>_`` keys of ``context`` stand for; None if none."""
    names = {f.name for f in fields(cls) if not f.name.startswith("_")}
    given: dict[str, Any] = {}
    for key, text in context.items():
        if not key.startswith(prefix + "_") or (prefix == _WANDB and key.startswith(_SWEEP + "_")):
            continue
        name = key[len(prefix) + 1:]
        if name not in names:
            raise SpecError(f"custom context key {key!r}", text,
                            f"is not a field of {prefix}_config(...) (its keys are "
                            f"{prefix}_<field>)", "set it through "
                            f"{prefix}_config(...), or rename the key")
        try:
            given[name] = json.loads(text) if name in _JSON_FIELDS else text
        except json.JSONDecodeError as e:
            raise SpecError(f"custom context key {key!r}", text, "must hold JSON",
                            f"set it through {prefix}_config(...)") from e
    return cls(**given) if given else None


@dataclass(frozen=True, eq=False)
class WandbConfig(_ContextConfig):
    """What ``wandb_config(...)`` builds: ``wandb.init`` arguments, and Flyte's own
    ``run_mode``, ``rank_scope`` and ``download_logs``."""

    project: str | None = None
    entity: str | None = None
    host: str | None = None
    id: str | None = None
    name: str | None = None
    tags: list[str] | None = None
    config: dict[str, Any] | None = None
    mode: str | None = None
    group: str | None = None
    run_mode: RunMode = "auto"
    rank_scope: RankScope = "global"
    download_logs: bool = False
    kwargs: dict[str, Any] | None = None
    _blocks: list[AbstractContextManager[None]] = field(default_factory=list, init=False,
                                                        repr=False)
    _prefix = _WANDB

    def __post_init__(self) -> None:
        for name in ("project", "entity", "host", "id", "name", "group"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise SpecError(f"wandb_config({name}=...)", value,
                                "must be a non-empty string or None", f'e.g. {name}="my-{name}"')
        check_choice("wandb_config(run_mode=...)", self.run_mode, RUN_MODES)
        check_choice("wandb_config(rank_scope=...)", self.rank_scope, RANK_SCOPES)
        check_choice("wandb_config(mode=...)", self.mode, WANDB_MODES, optional=True)
        if not isinstance(self.download_logs, bool):
            raise SpecError("wandb_config(download_logs=...)", self.download_logs,
                            "must be True or False", "use download_logs=True")
        if self.tags is not None and (not isinstance(self.tags, list | tuple) or not all(
                isinstance(t, str) for t in self.tags)):
            raise SpecError("wandb_config(tags=...)", self.tags, "must be a list of strings",
                            'e.g. tags=["baseline"]')
        if self.config is not None and not isinstance(self.config, Mapping):
            raise SpecError("wandb_config(config=...)", self.config,
                            "must be a dict of hyperparameters", 'e.g. config={"lr": 0.001}')
        for name in ("tags", "config", "kwargs"):
            _check_json(f"wandb_config({name}=...)", getattr(self, name))
        for key in self.kwargs or {}:
            check_init_argument("wandb_config", key)

    def init_kwargs(self) -> dict[str, Any]:
        """The ``wandb.init`` arguments this config sets (Flyte's own fields left out)."""
        out = {**(self.kwargs or {})}
        for name in ("project", "entity", "host", "id", "name", "tags", "config", "mode",
                     "group"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if "host" in out:  # wandb.init has no host=: the host is a setting
            out["settings"] = {**out.get("settings", {}), "base_url": out.pop("host")}
        return out


# wandb.init's parameters (wandb 0.31), so a misspelt one is refused when it is written.
INIT_ARGUMENTS = ("entity", "project", "dir", "id", "name", "notes", "tags", "config",
                  "config_exclude_keys", "config_include_keys", "allow_val_change", "group",
                  "job_type", "mode", "force", "reinit", "resume", "resume_from", "fork_from",
                  "save_code", "tensorboard", "sync_tensorboard", "monitor_gym", "settings",
                  "anonymous")


def check_init_argument(where: str, key: str) -> None:
    if key in INIT_ARGUMENTS:
        return
    near = difflib.get_close_matches(key, INIT_ARGUMENTS, n=1)
    raise SpecError(f"{where}({key}=...)", key, "is not an argument of wandb.init",
                    (f"did you mean {near[0]!r}? " if near else "")
                    + "wandb.init takes " + ", ".join(INIT_ARGUMENTS))


def wandb_config(project: str | None = None, entity: str | None = None,
                 host: str | None = None, id: str | None = None, name: str | None = None,
                 tags: list[str] | None = None, config: dict[str, Any] | None = None,
                 mode: str | None = None, group: str | None = None,
                 run_mode: RunMode = "auto", rank_scope: RankScope = "global",
                 download_logs: bool = False, **kwargs: Any) -> WandbConfig:
    """W&B settings for the custom context: ``with_runcontext(custom_context=wandb_config(
    project="p"))`` for a run, or ``with wandb_config(tags=["x"]):`` around task calls.

    ``run_mode``: "auto" (a new run, or the parent task's run when it has one), "new" (always
    a new run), "shared" (always the parent's run). ``rank_scope`` (gangs): "global" (one
    run, or one group, for the gang) or "worker" (one per node). ``kwargs``: other
    ``wandb.init`` arguments (``notes``, ``job_type``, ...)."""
    return WandbConfig(project=project, entity=entity, host=host, id=id, name=name, tags=tags,
                       config=config, mode=mode, group=group, run_mode=run_mode,
                       rank_scope=rank_scope, download_logs=download_logs,
                       kwargs=kwargs or None)


def get_wandb_context() -> WandbConfig | None:
    """The ``wandb_config`` of the current custom context (the task's, with the blocks open
    around this line), or None when it sets none."""
    found: WandbConfig | None = _read(WandbConfig, _WANDB, shoal.get_custom_context())
    return found


@dataclass(frozen=True, eq=False)
class WandbSweepConfig(_ContextConfig):
    """What ``wandb_sweep_config(...)`` builds: a W&B sweep's configuration."""

    name: str | None = None
    method: str | None = None
    metric: dict[str, Any] | None = None
    parameters: dict[str, Any] | None = None
    project: str | None = None
    entity: str | None = None
    prior_runs: list[str] | None = None
    download_logs: bool = False
    kwargs: dict[str, Any] | None = None
    _blocks: list[AbstractContextManager[None]] = field(default_factory=list, init=False,
                                                        repr=False)
    _prefix = _SWEEP

    def __post_init__(self) -> None:
        check_choice("wandb_sweep_config(method=...)", self.method,
                     ("random", "grid", "bayes"), optional=True)
        if not isinstance(self.download_logs, bool):
            raise SpecError("wandb_sweep_config(download_logs=...)", self.download_logs,
                            "must be True or False", "use download_logs=True")
        for name in ("metric", "parameters", "prior_runs", "kwargs"):
            _check_json(f"wandb_sweep_config({name}=...)", getattr(self, name))

    def to_sweep_config(self) -> dict[str, Any]:
        """The dict ``wandb.sweep(sweep=...)`` takes."""
        out = {k: getattr(self, k) for k in ("name", "method", "metric", "parameters")
               if getattr(self, k) is not None}
        return {**out, **(self.kwargs or {})}


def wandb_sweep_config(method: str | None = None, metric: dict[str, Any] | None = None,
                       parameters: dict[str, Any] | None = None, project: str | None = None,
                       entity: str | None = None, prior_runs: list[str] | None = None,
                       name: str | None = None, download_logs: bool = False,
                       **kwargs: Any) -> WandbSweepConfig:
    """A W&B sweep's configuration for the custom context (``@wandb_sweep`` creates it);
    ``kwargs``: other sweep keys (``early_terminate``, ``description``, ...)."""
    return WandbSweepConfig(name=name, method=method, metric=metric, parameters=parameters,
                            project=project, entity=entity, prior_runs=prior_runs,
                            download_logs=download_logs, kwargs=kwargs or None)


def get_wandb_sweep_context() -> WandbSweepConfig | None:
    """The ``wandb_sweep_config`` of the current custom context, or None."""
    found: WandbSweepConfig | None = _read(WandbSweepConfig, _SWEEP, shoal.get_custom_context())
    return found
