"""Tasks of the local engine inside their images (``shoal run --containers``).

Code outside ``_engines/local/containers/`` imports the names in ``__all__`` from here. Its
modules: ``plan.py`` (a process in its image as one ``podman run`` argv: pure, printed by
``--dry-run``), ``container_set.py`` (`ContainerSet`: the run's containers, checked, planned,
swept, ended), ``container.py`` (`Container`: one container, ended and reaped by name),
``images.py`` (each environment's image, built on demand once per tag), ``runtime.py`` (the
one place podman's commands run and fail) and ``oom.py`` (the kernel's word on an OOM kill).
None imports a heavy library.
"""

from __future__ import annotations

from shoal._engines.local.containers.container import Container, ContainerExit
from shoal._engines.local.containers.container_set import ContainerSet
from shoal._engines.local.containers.plan import (
    LAUNCHER_COMMAND,
    RUN_LABEL,
    WORKER_COMMAND,
    ContainerPlan,
    container_name,
    passed_environ,
)

__all__ = [
    "LAUNCHER_COMMAND",
    "RUN_LABEL",
    "WORKER_COMMAND",
    "Container",
    "ContainerExit",
    "ContainerPlan",
    "ContainerSet",
    "container_name",
    "passed_environ",
]
