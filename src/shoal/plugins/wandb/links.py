"""``Wandb`` and ``WandbSweep``: Flyte's task links to a W&B run or sweep.

``@env.task(links=(Wandb(project="p", entity="e"),))`` and ``task.override(links=(...))`` take
them; Shoal records a link's ``name`` with the task (``shoal runs`` shows it) and renders no
page of its own, and ``get_link`` gives the URL Flyte's UI would show, by Flyte's rules:
``{host}/{entity}/{project}/runs/{id}`` (``groups/`` for a gang's ``run_mode="new"``,
``sweeps/`` for a sweep), the id being the one ``@wandb_init`` gives the run
(`shoal.plugins.wandb.topology`). Without a project and an entity the link is the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shoal.plugins.wandb.config import RANK_SCOPES, RUN_MODES, RankScope, RunMode, check_choice

__all__ = ["Wandb", "WandbSweep"]

HOST = "https://wandb.ai"


def _where(project: str | None, entity: str | None, host: str,
           context: Mapping[str, str] | None) -> tuple[str | None, str | None, str]:
    context = context or {}
    return (project or context.get("wandb_project"), entity or context.get("wandb_entity"),
            context.get("wandb_host") or host)


@dataclass(frozen=True)
class Wandb:
    """A link to the W&B run (or group) of a task call."""

    host: str = HOST
    project: str | None = None
    entity: str | None = None
    run_mode: RunMode = "auto"
    rank_scope: RankScope = "global"
    id: str | None = None
    name: str = "Weights & Biases"
    # A gang's: whether the task runs as one (set by @wandb_init), and the node of a
    # per-node link (rank_scope="worker").
    _is_distributed: bool = False
    _worker_index: int | None = None

    def __post_init__(self) -> None:
        check_choice("Wandb(run_mode=...)", self.run_mode, RUN_MODES)
        check_choice("Wandb(rank_scope=...)", self.rank_scope, RANK_SCOPES)

    def get_link(self, run_name: str, project: str, domain: str, context: Mapping[str, str],
                 parent_action_name: str, action_name: str, pod_name: str,
                 **kwargs: Any) -> str:
        w_project, w_entity, host = _where(self.project, self.entity, self.host, context)
        if not w_project or not w_entity:
            return host
        given = self.id or (context or {}).get("wandb_id")
        base = given or f"{run_name}-{action_name}"
        if self._is_distributed:
            per_worker = self._worker_index is not None and self.rank_scope == "worker"
            target = f"{base}-worker-{self._worker_index}" if per_worker else base
            kind = "groups" if self.run_mode == "new" else "runs"
            return f"{host}/{w_entity}/{w_project}/{kind}/{target}"
        parent = (context or {}).get("_wandb_run_id")
        if self.run_mode == "new":
            run_id = base
        elif parent:
            run_id = parent
        elif self.run_mode == "shared":
            return f"{host}/{w_entity}/{w_project}"
        else:
            run_id = base
        return f"{host}/{w_entity}/{w_project}/runs/{run_id}"


@dataclass(frozen=True)
class WandbSweep:
    """A link to the W&B sweep a task creates or joins."""

    host: str = HOST
    project: str | None = None
    entity: str | None = None
    id: str | None = None
    name: str = "Weights & Biases Sweep"

    def get_link(self, run_name: str, project: str, domain: str, context: Mapping[str, str],
                 parent_action_name: str, action_name: str, pod_name: str,
                 **kwargs: Any) -> str:
        w_project, w_entity, host = _where(self.project, self.entity, self.host, context)
        if not w_project or not w_entity:
            return host
        sweep = self.id or (context or {}).get("_wandb_sweep_id")
        tail = f"/{sweep}" if sweep else ""
        return f"{host}/{w_entity}/{w_project}/sweeps{tail}"
