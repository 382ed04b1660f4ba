"""The Flyte 2 settings of ``@env.task(...)`` beyond retries, timeout and cache.

Each is honoured with Flyte's meaning where Shoal can, or refused with what to do instead:

- ``short_name``: the name shown for the task (``shoal runs``, the call tree); the task is
  still found by its function's name (or ``name=``), which is part of its cache key.
- ``docs``: a string or Flyte's ``Documentation(description=...)``; default: the docstring.
- ``pod_template``, ``interruptible``: this task's own, replacing its environment's.
- ``links``: recorded on the spec (their names), shown by ``shoal runs``; nothing is rendered
  (``task.override(links=...)`` replaces them, as in Flyte).
- ``entrypoint``: a hint that the task is meant to be run directly; recorded.
- ``max_inline_io_bytes``: accepted; Shoal has no inline limit (large values move through the
  store), so no size is refused.
- ``queue``: the Kueue queue label of the task's pod template (the LocalQueue on Kubernetes,
  the local queue locally), as ``TaskEnvironment(queue=)`` and ``task.override(queue=)``.
- ``triggers``, ``task_resolver``, ``produces_artifacts``: refused.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal._api.pod_template import PodTemplate, with_queue
from shoal.errors import SpecError

if TYPE_CHECKING:
    from shoal._api.environment import TaskEnvironment


@dataclass(frozen=True)
class TaskSettings:
    short_name: str = ""
    docs: str | None = None  # None: the function's docstring
    pod_template: Any = None
    interruptible: bool | None = None
    links: tuple[str, ...] = ()
    entrypoint: bool = False

    def env_changes(self) -> dict[str, Any]:
        """What this task's calls change in its environment's spec."""
        out: dict[str, Any] = {}
        if self.pod_template is not None:
            out["pod_template"] = self.pod_template
        if self.interruptible is not None:
            out["interruptible"] = self.interruptible
        return out

    def docs_for(self, func: Any) -> str:
        if self.docs is not None:
            return self.docs
        return inspect.getdoc(func) or ""

    @classmethod
    def check(cls, env: TaskEnvironment, *, short_name: object = None, docs: object = None,
              pod_template: object = None, interruptible: object = None, links: object = (),
              entrypoint: object = False, max_inline_io_bytes: object = None,
              queue: object = None, triggers: object = (), task_resolver: object = None,
              produces_artifacts: object = False) -> TaskSettings:
        where = f"@{env.name}.task"
        if short_name is not None and (not isinstance(short_name, str) or not short_name):
            raise SpecError(f"{where}(short_name=...)", short_name, "must be a non-empty string",
                            'e.g. short_name="train"')
        if docs is not None and not isinstance(docs, str):
            description = getattr(docs, "description", None)
            if not isinstance(description, str):
                raise SpecError(f"{where}(docs=...)", docs,
                                "must be a string or have a .description string",
                                'e.g. docs="Trains the model"')
            docs = description
        if pod_template is not None and not isinstance(pod_template, PodTemplate):
            raise SpecError(f"{where}(pod_template=...)", pod_template,
                            "must be shoal.PodTemplate(...)",
                            'use shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "a"})')
        if interruptible is not None and not isinstance(interruptible, bool):
            raise SpecError(f"{where}(interruptible=...)", interruptible,
                            "must be a bool or None", "use True, False or leave it out")
        if not isinstance(entrypoint, bool):
            raise SpecError(f"{where}(entrypoint=...)", entrypoint, "must be a bool",
                            "use entrypoint=True")
        if max_inline_io_bytes is not None and (isinstance(max_inline_io_bytes, bool) or not
                                                isinstance(max_inline_io_bytes, int)
                                                or max_inline_io_bytes <= 0):
            raise SpecError(f"{where}(max_inline_io_bytes=...)", max_inline_io_bytes,
                            "must be a positive int", "leave it out: Shoal has no inline limit")
        if queue is not None:
            pod_template = with_queue(f"{where}(queue=...)", queue,
                                      pod_template if pod_template is not None
                                      else env.pod_template)
        if triggers not in ((), None, []):
            raise SpecError(f"{where}(triggers=...)", triggers,
                            "Shoal has no scheduler, so triggers (Cron, FixedRate) cannot fire",
                            "schedule `shoal run FILE TASK` with cron, a systemd timer or your "
                            "CI's schedule")
        if task_resolver is not None:
            raise SpecError(f"{where}(task_resolver=...)", task_resolver,
                            "Shoal's workers find a task by its file and name; a custom "
                            "resolver cannot apply", "leave it out")
        if produces_artifacts is not False:
            raise SpecError(f"{where}(produces_artifacts=...)", produces_artifacts,
                            "Flyte artifacts (a catalog of named outputs) are not part of Shoal",
                            "return the values: they are kept with the run (`shoal runs`, "
                            "Run.outputs()), or cache the task with cache=\"auto\"")
        return cls(short_name=short_name or "", docs=docs,
                   pod_template=pod_template, interruptible=interruptible,
                   links=link_names(where, links), entrypoint=entrypoint)


def link_names(where: str, links: object) -> tuple[str, ...]:
    if links is None:
        return ()
    items = links if isinstance(links, tuple | list) else (links,)
    out = []
    for link in items:
        name = link if isinstance(link, str) else getattr(link, "name", None)
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}(links=...)", link, "must be a string or a link with a "
                            ".name", 'e.g. links=("https://wandb.ai/team/project",)')
        out.append(name)
    return tuple(out)
