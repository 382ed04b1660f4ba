"""What `shoal run` and `shoal deploy` do with ``--engine kubernetes``: compile the manifests
(`shoal._engines.kubernetes`), and with ``--out DIR`` write them as YAML files.

Submitting to a cluster needs a reachable API server, which these machines do not have; the
dry run is complete and exactly what would be applied (`kubectl apply -f DIR`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shoal._runtime import contract
from shoal.errors import SpecError


def kube_config(settings: str | None) -> Any:
    """The engine's settings: ``--kube-settings FILE`` (YAML or JSON of `KubeConfig` fields),
    the store from ``SHOAL_STORE``."""
    from shoal._engines.kubernetes import KubeConfig

    values: dict[str, Any] = {}
    if settings:
        text = Path(settings).read_text()
        import yaml

        loaded = yaml.safe_load(text) if not text.lstrip().startswith("{") else json.loads(text)
        if not isinstance(loaded, dict):
            raise SpecError("--kube-settings", settings, "must hold a mapping of KubeConfig "
                            "fields", "e.g. namespace: ml\\nregistry: ghcr.io/my-org")
        values.update(loaded)
    values.setdefault("store", contract.store_uri())
    if not str(values["store"]).startswith(("s3://", "gs://")):
        raise SpecError("store", values["store"],
                        "pods on other machines need an object store: s3:// or gs://",
                        "pass --store s3://bucket/prefix (or set store: in --kube-settings)")
    return KubeConfig(**values)


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


def run_manifests(task: Any, call: Any, run: str, config: Any) -> list[dict[str, Any]]:
    """What ``shoal run`` would create for the root call: a clustered root is its JobSet; any
    other root runs in a driver Job (with its RBAC) that submits the calls it makes."""
    from shoal._engines.kubernetes import CodeBundle, compile_call, compile_driver, compile_rbac
    from shoal._storage.bundle import build

    bundle = build(call.task.code_file, config.store, upload=False)
    code = CodeBundle(uri=bundle.uri, file=bundle.file)
    if call.task.env.cluster is not None:
        return compile_call(call, run=run, action="a0", attempt=0, config=config, code=code)
    return [*compile_rbac(config), *compile_driver(call, run=run, config=config, code=code)]


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
