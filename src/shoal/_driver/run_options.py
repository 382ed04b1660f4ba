"""Run-wide choices (`shoal.with_runcontext`) that the runner and the controller apply to every
call of one run: environment variables, interruptibility, cache use, labels."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shoal._spec.call import CallSpec, EnvSpec, frozen_map
from shoal._spec.profile import ProfileSpec


@dataclass(frozen=True)
class RunOptions:
    # Added to every task process of the run; a run's value wins over its environment's.
    env_vars: Mapping[str, str] = field(default_factory=dict)
    interruptible: bool | None = None  # None: each environment's own setting
    overwrite_cache: bool = False  # run every cached call again and rewrite its entry
    disable_run_cache: bool = False  # neither read nor write the cache in this run
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # The root call's `shoal.custom_context` (over what the block around the run set).
    custom_context: Mapping[str, str] = field(default_factory=dict)
    # Where the run's metrics are forwarded ("tensorboard:DIR,wandb"); None: the env var's.
    metrics: str | None = None
    # `shoal run --profile ENV:...`: replaces those environments' own `profile=`.
    profiles: Mapping[str, ProfileSpec] = field(default_factory=dict)

    @property
    def cache_read(self) -> bool:
        return not (self.overwrite_cache or self.disable_run_cache)

    @property
    def cache_write(self) -> bool:
        return not self.disable_run_cache

    @property
    def changes_envs(self) -> bool:
        return bool(self.env_vars) or self.interruptible is not None or bool(self.profiles)

    def apply_env(self, env: EnvSpec) -> EnvSpec:
        if not self.changes_envs:
            return env
        changes: dict[str, Any] = {}
        if self.env_vars:
            changes["env_vars"] = frozen_map({**env.env_vars, **self.env_vars})
        if self.interruptible is not None:
            changes["interruptible"] = self.interruptible
        if env.name in self.profiles:
            changes["profile"] = self.profiles[env.name]
        return replace(env, **changes) if changes else env

    def apply(self, call: CallSpec) -> CallSpec:
        if not self.changes_envs:
            return call
        return replace(call, task=replace(call.task, env=self.apply_env(call.task.env)))

    def seed_root(self, call: CallSpec) -> CallSpec:
        if not self.custom_context:
            return call
        return replace(call, custom_context=frozen_map({**call.custom_context,
                                                        **self.custom_context}))

    def record(self) -> dict[str, Any]:
        """What the run's records keep of these choices (its ``run_context`` event)."""
        return {"labels": dict(self.labels), "annotations": dict(self.annotations),
                "env_vars": sorted(self.env_vars), "interruptible": self.interruptible,
                "overwrite_cache": self.overwrite_cache,
                "disable_run_cache": self.disable_run_cache,
                "custom_context": dict(self.custom_context), "metrics": self.metrics,
                "profiles": {k: v.to_text() for k, v in self.profiles.items()}}
