"""Environments of a user's file, for the verbs that act on all of them (deploy, image)."""

from __future__ import annotations

from typing import Any

from shoal.errors import SpecError


def environments_of(path: str) -> dict[str, Any]:
    """Every environment the file defines or reaches through depends_on, by name.

    Two different environments with one name would be ambiguous on any engine: an error.
    """
    from shoal._api.environment import TaskEnvironment, registered_environments
    from shoal._runtime.loader import load_file

    module = load_file(path)
    roots = [v for v in vars(module).values() if isinstance(v, TaskEnvironment)]
    roots += [e for e in registered_environments().values()
              if any(t.func.__module__ == module.__name__ for t in e.tasks.values())]
    found: dict[str, TaskEnvironment] = {}
    for root in roots:
        for name, env in root.reachable().items():
            if name in found and found[name] is not env:
                raise SpecError("TaskEnvironment.name", name,
                                "two different environments share this name",
                                "give each environment its own name")
            found[name] = env
    if not found:
        raise SpecError("FILE", path, "defines no TaskEnvironment",
                        "define one: env = shoal.TaskEnvironment(name='train')")
    return found
