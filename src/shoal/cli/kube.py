"""What `shoal deploy --engine kubernetes` does: compile the manifests of every environment
(`shoal._engines.kubernetes`), and with ``--out DIR`` write them as YAML files (`shoal run`
submits through `shoal._driver.remote`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shoal import _contract as contract


def kube_config(settings: str | None) -> Any:
    """The engine's settings: ``--kube-settings FILE`` (YAML or JSON of `KubeConfig` fields),
    the store from ``SHOAL_STORE``; checked as `shoal run` checks them."""
    from shoal._engines.kubernetes.submit import load_settings

    return load_settings(settings, "--kube-settings", contract.store_uri())


def write(objects: Iterable[Mapping[str, Any]], out: str | None) -> str:
    """Write one YAML file per object into ``out`` (if given); the whole YAML text."""
    from shoal._engines.kubernetes import to_yaml

    objects = list(objects)
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        for i, obj in enumerate(objects):
            name = f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
            (folder / name).write_text(to_yaml([obj]))
    return to_yaml(objects)


def deploy_manifests(envs: Mapping[str, Any], config: Any, code_file: str) -> list[dict[str, Any]]:
    """One representative object per environment (its first task, no inputs) and the RBAC."""
    from shoal._engines.kubernetes import CodeBundle, compile_call, compile_rbac
    from shoal._spec.call import CallSpec
    from shoal._storage.bundle import build

    bundle = build(code_file, config.store, upload=False)
    code = CodeBundle(uri=bundle.uri, file=bundle.file)
    objects: list[dict[str, Any]] = list(compile_rbac(config))
    for _, env in sorted(envs.items()):
        if not env.tasks:
            continue
        task = next(iter(env.tasks.values()))
        call = CallSpec(task=task.spec(), inputs={}, parent_action=None)
        objects += compile_call(call, run="deploy", action="a0", attempt=0, config=config,
                                code=code)
    return objects
