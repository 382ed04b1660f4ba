"""The pod template of a task call: image, command, env contract, resources, volumes, placement.

Every pod Shoal makes (a plain task's Job, each node of a JobSet, the driver) is built here, so
they all carry the same contract variables, the same store settings and the same merge of the
user's `PodTemplate`. Pure: values in, dicts out.

The environment's ``resources`` and ``image`` are the authoring layer's frozen values; they are
used through their public methods only (``to_k8s()``, ``accelerator``, ``uri(registry)``...),
since an engine never imports the authoring layer.
"""

from __future__ import annotations

import math
import posixpath
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shoal import _contract as contract
from shoal._engines.kubernetes.config import STORE_SCHEMES, KubeConfig
from shoal._engines.kubernetes.gpu_products import accelerator_selector
from shoal._engines.kubernetes.secrets import secret_env_entries, secret_volume
from shoal._engines.kubernetes.validate import KUEUE_LABELS
from shoal._spec.call import EnvSpec
from shoal._spec.secret_names import REDACTED, secret_reason
from shoal.errors import SpecError

__all__ = ["LABEL_PREFIX", "CodeBundle", "pod_template"]

LABEL_PREFIX = "shoal.dev/"
KUEUE_PREFIX = "kueue.x-k8s.io/"
PRIMARY = "primary"
WORK_VOLUME = "shoal-work"
SHM_VOLUME = "dshm"


@dataclass(frozen=True)
class CodeBundle:
    """The user's code in the object store: a content-hashed archive, unpacked by the launcher
    under ``<home>/code``; ``file`` is the task file's path inside it."""

    uri: str  # e.g. s3://bucket/shoal/code/<sha256>.tar.gz
    file: str  # e.g. "pipeline.py" or "pkg/train.py"

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str) or not self.uri.startswith(STORE_SCHEMES):
            raise SpecError("CodeBundle.uri", self.uri, "pods fetch code from an object store: "
                            "s3:// or gs://", "upload the bundle under the KubeConfig's store")
        norm = posixpath.normpath(self.file) if isinstance(self.file, str) else ""
        if not norm or norm.startswith(("/", "..")) or not norm.endswith(".py"):
            raise SpecError("CodeBundle.file", self.file, "must be the task file's relative "
                            "path inside the bundle, ending in .py", 'e.g. "pipeline.py"')


def code_dir(config: KubeConfig) -> str:
    return posixpath.join(config.home, "code")


def image_for(env: EnvSpec, config: KubeConfig) -> str:
    image = env.image
    if isinstance(image, str):
        return image
    if image is not None:
        uri: str = image.uri(config.registry)
        return uri
    if config.default_image is None:
        raise SpecError(f"TaskEnvironment({env.name!r}).image", None, "an environment without "
                        "an image needs KubeConfig.default_image on Kubernetes",
                        "give the environment image=shoal.Image.from_debian_base(), or set "
                        "KubeConfig(default_image=...) to an image that holds Shoal")
    return config.default_image


def split_labels(env: EnvSpec, config: KubeConfig, *,
                 default_queue: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(labels of the Job/JobSet itself, labels of its pods): Kueue's keys go on the object,
    where Kueue reads them, and nowhere else."""
    pt = env.pod_template
    labels: dict[str, str] = dict(pt.labels) if pt is not None else {}
    own = {k: v for k, v in labels.items() if k.startswith(KUEUE_PREFIX)}
    pods = {k: v for k, v in labels.items() if not k.startswith(KUEUE_PREFIX)}
    if default_queue and config.default_queue and KUEUE_LABELS[0] not in own:
        own[KUEUE_LABELS[0]] = config.default_queue
    return own, pods


def _refuse_secret_values(env: EnvSpec) -> None:
    """A manifest is applied, stored by the API server and shown by ``kubectl get -o yaml``:
    a value that looks like a secret (by its name or its look) must come from the cluster's
    Secret instead."""
    for name, value in env.env_vars.items():
        reason = secret_reason(name, value)
        if reason is not None:
            raise SpecError(f"TaskEnvironment({env.name!r}).env_vars[{name!r}]", REDACTED,
                            f"looks like a secret ({reason}), and on Kubernetes its value "
                            "would be written into the manifest",
                            f"put the value in the Kubernetes Secret KubeConfig.secret_name and "
                            f"give the environment secrets=[shoal.Secret(key=..., "
                            f"as_env_var={name!r})]; if it is no secret, say so: "
                            f"env_vars={{{name!r}: shoal.NotSecret(...)}}")


def _refuse_template_secrets(where: str, user: Mapping[str, Any]) -> None:
    """The user's own pod template goes into the manifest as written: a plain ``value`` there
    that looks like a secret is refused as the environment's would be."""
    for key in ("containers", "initContainers"):
        for c in user.get(key) or []:
            for e in (c.get("env") or []) if isinstance(c, Mapping) else []:
                name, value = (e.get("name"), e.get("value")) if isinstance(e, Mapping) else \
                    (None, None)
                if isinstance(name, str) and isinstance(value, str):
                    reason = secret_reason(name, value)
                    if reason is not None:
                        raise SpecError(f"{where}.{key}[{c.get('name')!r}].env[{name!r}]",
                                        REDACTED, f"looks like a secret ({reason}), and its "
                                        "value would be written into the manifest",
                                        "read it from a Kubernetes Secret: valueFrom: "
                                        "{secretKeyRef: {name: ..., key: ...}}, or give the "
                                        f"environment secrets=[shoal.Secret(key=..., "
                                        f"as_env_var={name!r})]")


def env_entries(env: EnvSpec, config: KubeConfig, values: Mapping[str, str],
                field_refs: Mapping[str, str]) -> list[dict[str, Any]]:
    """The container's ``env``: the environment's own variables and secrets, then the contract's
    (``field_refs`` are read from the pod's own metadata through the downward API)."""
    # As on the local engine: env_vars win over secrets of the same name, and output is
    # unbuffered whatever the environment says (logs must reach the pod's log as they happen).
    forced = {"PYTHONUNBUFFERED": "1"}
    _refuse_secret_values(env)
    # str(v): a NotSecret is a str subclass, which the manifests' YAML dumper refuses.
    out: list[dict[str, Any]] = [{"name": k, "value": str(v)}
                                 for k, v in env.env_vars.items() if k not in forced]
    out += secret_env_entries(env, config, taken={*env.env_vars, *forced})
    for name, value in values.items():
        if name in field_refs:
            out.append({"name": name,
                        "valueFrom": {"fieldRef": {"fieldPath": field_refs[name]}}})
        else:
            out.append({"name": name, "value": value})
    if config.s3_endpoint:
        out.append({"name": contract.S3_ENDPOINT, "value": config.s3_endpoint})
    out += [{"name": k, "value": v} for k, v in forced.items()]
    return out


def _container(env: EnvSpec, config: KubeConfig, command: list[str],
               env_list: list[dict[str, Any]]) -> dict[str, Any]:
    c: dict[str, Any] = {"name": _primary_name(env), "image": image_for(env, config),
                         "command": command, "env": env_list}
    if config.store_secret:
        c["envFrom"] = [{"secretRef": {"name": config.store_secret}}]
    r = env.resources
    if r is not None:
        resources = {k: v for k, v in r.to_k8s().items() if v}
        if resources:
            c["resources"] = resources
    mounts = [{"name": WORK_VOLUME, "mountPath": config.home}]
    if r is not None and (r.shm_quantity is not None or r.shm_auto):
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    secret = secret_volume(env, config)
    if secret is not None:
        mounts.append(secret[1])
    c["volumeMounts"] = mounts
    return c


def _volumes(env: EnvSpec, config: KubeConfig) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [{"name": WORK_VOLUME, "emptyDir": {}}]
    secret = secret_volume(env, config)
    if secret is not None:
        volumes.append(secret[0])
    r = env.resources
    if r is not None and (r.shm_quantity is not None or r.shm_auto):
        shm: dict[str, Any] = {"medium": "Memory"}
        if r.shm_quantity is not None:
            shm["sizeLimit"] = r.shm_quantity
        volumes.append({"name": SHM_VOLUME, "emptyDir": shm})
    return volumes


def _placement(env: EnvSpec, config: KubeConfig) -> tuple[dict[str, str], list[Any]]:
    selector: dict[str, str] = {}
    tolerations: list[Any] = []
    r = env.resources
    if r is not None and r.gpu_count:
        tolerations += [dict(t) for t in config.gpu_tolerations]
        if r.accelerator is not None:
            selector.update(accelerator_selector(r.accelerator, config.accelerators, env.name))
    if env.interruptible:
        selector.update(config.interruptible_node_selector)
        tolerations += [dict(t) for t in config.interruptible_tolerations]
    return selector, tolerations


def _merge_container(main: dict[str, Any], mine: Mapping[str, Any],
                     where: str) -> dict[str, Any]:
    """Shoal's task container with what the user's template says about it: Shoal's image,
    command and contract win; the user's variables, mounts, resources and other fields join."""
    paths = {m["mountPath"] for m in main["volumeMounts"]}
    for m in mine.get("volumeMounts", []):
        if m.get("mountPath") in paths:
            raise SpecError(f"{where}.containers[{main['name']!r}].volumeMounts",
                            m.get("mountPath"), "Shoal mounts this path itself",
                            "mount your volume elsewhere")
    ours = {e["name"] for e in main["env"]}
    merged = dict(main)
    merged["env"] = main["env"] + [e for e in mine.get("env", []) if e.get("name") not in ours]
    if mine.get("envFrom"):
        merged["envFrom"] = main.get("envFrom", []) + list(mine["envFrom"])
    theirs = mine.get("resources") or {}
    resources = dict(theirs)  # requests/limits merge key by key; "claims" and such stay theirs
    for key, amounts in main.get("resources", {}).items():
        resources[key] = {**(theirs.get(key) or {}), **amounts}
    if resources:
        merged["resources"] = resources
    merged["volumeMounts"] = main["volumeMounts"] + list(mine.get("volumeMounts", []))
    merged.update({k: v for k, v in mine.items() if k not in merged})
    return merged


def _primary_name(env: EnvSpec) -> str:
    pt = env.pod_template
    return str(pt.primary_container_name) if pt is not None else PRIMARY


_WARNED_REUSE: set[str] = set()  # environments warned that reuse does not apply here


def pod_template(env: EnvSpec, config: KubeConfig, *, command: list[str],
                 values: Mapping[str, str], field_refs: Mapping[str, str] | None = None,
                 labels: Mapping[str, str], grace_period: float = 30.0,
                 service_account: str | None = None, owns_hostname: bool = False,
                 ) -> dict[str, Any]:
    """A ``PodTemplateSpec`` for one pod of ``env`` running ``command`` with the contract
    variables ``values``, merged with the environment's `PodTemplate` (the user's values win
    except where Shoal's must: the image, command and contract of the task's container,
    ``restartPolicy: Never``, and ``hostname``/``subdomain`` in a JobSet)."""
    where = f"TaskEnvironment({env.name!r}).pod_template.pod_spec"
    if env.reuse is not None and env.name not in _WARNED_REUSE:
        _WARNED_REUSE.add(env.name)
        warnings.warn(f"environment {env.name!r}: ReusePolicy does not apply on Kubernetes "
                      "(each call of a plain task is its own Job and pod)", stacklevel=2)
    pt = env.pod_template
    user: dict[str, Any] = (pt.pod_spec or {}) if pt is not None else {}
    if user.get("restartPolicy", "Never") != "Never":
        raise SpecError(f"{where}.restartPolicy", user["restartPolicy"], "Shoal's pods run once "
                        "(the engine restarts attempts, and a podFailurePolicy needs Never)",
                        "leave restartPolicy out")
    for key in ("hostname", "subdomain"):
        if owns_hostname and key in user:
            raise SpecError(f"{where}.{key}", user[key], "JobSet names the pods of a clustered "
                            "task (node 0's name is the master address)", f"leave {key} out")
    _refuse_template_secrets(where, user)
    main = _container(env, config, command, env_entries(env, config, values, field_refs or {}))
    containers = [dict(c) for c in user.get("containers", [])]
    mine = next((c for c in containers if c.get("name") == main["name"]), None)
    if mine is None:
        containers.insert(0, main)
    else:
        containers[containers.index(mine)] = _merge_container(main, mine, where)
    volumes = _volumes(env, config)
    taken = {v["name"] for v in volumes}
    for v in user.get("volumes", []):
        if v.get("name") in taken:
            raise SpecError(f"{where}.volumes", v.get("name"), "Shoal uses this volume name",
                            "rename your volume")
    selector, tolerations = _placement(env, config)
    for key, value in (user.get("nodeSelector") or {}).items():
        if key in selector and selector[key] != value:
            raise SpecError(f"{where}.nodeSelector[{key!r}]", value, f"conflicts with "
                            f"{selector[key]!r} from the accelerator or interruptible settings",
                            "drop it from the pod template")
        selector[key] = value
    spec: dict[str, Any] = {"restartPolicy": "Never"}
    account = service_account or user.get("serviceAccountName") or config.task_service_account
    if service_account and user.get("serviceAccountName") not in (None, service_account):
        raise SpecError(f"{where}.serviceAccountName", user["serviceAccountName"], "the driver "
                        "runs as KubeConfig.service_account, which may create its children",
                        "leave serviceAccountName out")
    if account:
        spec["serviceAccountName"] = account
    spec["terminationGracePeriodSeconds"] = user.get(
        "terminationGracePeriodSeconds", math.ceil(grace_period) + 15)
    if selector:
        spec["nodeSelector"] = selector
    if tolerations or user.get("tolerations"):
        spec["tolerations"] = tolerations + list(user.get("tolerations", []))
    pulls = [{"name": s} for s in config.image_pull_secrets] + list(
        user.get("imagePullSecrets", []))
    if pulls:
        spec["imagePullSecrets"] = pulls
    spec["containers"] = containers
    spec["volumes"] = volumes + list(user.get("volumes", []))
    handled = {"containers", "volumes", "nodeSelector", "tolerations", "imagePullSecrets",
               "restartPolicy", "serviceAccountName", "terminationGracePeriodSeconds"}
    spec.update({k: v for k, v in user.items() if k not in handled})
    metadata: dict[str, Any] = {"labels": dict(labels)}
    if pt is not None and pt.annotations:
        metadata["annotations"] = dict(pt.annotations)
    return {"metadata": metadata, "spec": spec}
