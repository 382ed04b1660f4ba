"""`KubeConfig`: what the Kubernetes engine needs to know about one cluster and namespace.

Everything that differs between clusters (namespace, registry, node labels of accelerators,
the object store, service accounts, Kueue's default queue) lives here, never in a task's
spec, so the same program runs on any cluster. Checked at construction: a bad value names the
field, the rule and the fix, before any manifest is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from shoal._engines.kubernetes.names import is_dns1123_label, is_label_value
from shoal.errors import SpecError

__all__ = ["STORE_SCHEMES", "KubeConfig"]

# Pods reach only object stores: a file:// store on the submitting machine is not there.
STORE_SCHEMES = ("s3://", "gs://")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*"
                        r"[A-Za-z0-9])?$")
_ABS_PATH = re.compile(r"^/[^\0]*$")


def _fail(name: str, value: object, rule: str, fix: str) -> SpecError:
    return SpecError(f"KubeConfig.{name}", value, rule, fix)


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, kw_only=True)
class KubeConfig:
    """One cluster and namespace, as the Kubernetes engine sees them.

    Args:
        store: the object-store root pods read inputs from and write outputs to (``s3://``
            or ``gs://``); the same URI the submitting side uses.
        namespace: where every object is created.
        registry: pushed-to registry of built `shoal.Image`s (``ghcr.io/my-org``).
        default_image: the image of environments that name none; it must hold Shoal.
        accelerators: accelerator name (``gpu="H200:8"``) -> node selector, e.g.
            ``{"H100": {"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}}``; it wins over the
            well-known GPUs' ``nvidia.com/gpu.product`` values (`gpu_products.GPU_PRODUCTS`).
            An accelerator in neither renders without a product selector, with a warning.
        gpu_tolerations: tolerations added to pods that ask for GPUs (GPU nodes are often
            tainted ``nvidia.com/gpu:NoSchedule``).
        service_account: the driver's service account (``compile_rbac`` renders it).
        task_service_account: the service account of task pods (object-store access through
            workload identity); None keeps the namespace's default.
        store_secret: a Secret whose keys become environment variables of every pod
            (``AWS_ACCESS_KEY_ID``...), for stores reached with keys.
        s3_endpoint: an S3-compatible endpoint (MinIO) for ``SHOAL_S3_ENDPOINT``.
        secret_name: the Secret holding the values of environments' ``secrets=[...]``, one
            key per variable name.
        default_queue: Kueue LocalQueue for task calls whose environment names none; the
            driver is never queued by default (it waits on its children: queueing it behind
            them could deadlock a full queue).
        ttl_seconds_after_finished: finished Jobs/JobSets are deleted after this long.
        master_port: the port node 0 serves the rendezvous on.
        master_wait: seconds a node waits for node 0's DNS name to resolve.
        home: ``SHOAL_HOME`` in pods (an emptyDir); the code bundle is unpacked under it.
        image_pull_secrets: Secrets for pulling images from private registries.
        interruptible_node_selector / interruptible_tolerations: where ``interruptible=True``
            environments run (spot or preemptible node pools).
        launcher_command: how a task pod starts the node launcher.
        driver_command: how the driver pod starts the in-cluster driver.
    """

    store: str
    namespace: str = "default"
    registry: str | None = None
    default_image: str | None = None
    accelerators: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    gpu_tolerations: tuple[Mapping[str, Any], ...] = ()
    service_account: str = "shoal-driver"
    task_service_account: str | None = None
    store_secret: str | None = None
    s3_endpoint: str | None = None
    secret_name: str | None = None
    default_queue: str | None = None
    ttl_seconds_after_finished: int | None = 3600
    master_port: int = 29500
    master_wait: float = 600.0
    home: str = "/var/lib/shoal"
    image_pull_secrets: tuple[str, ...] = ()
    interruptible_node_selector: Mapping[str, str] = field(default_factory=dict)
    interruptible_tolerations: tuple[Mapping[str, Any], ...] = ()
    launcher_command: tuple[str, ...] = ("python", "-m", "shoal._runtime.node.launcher")
    driver_command: tuple[str, ...] = ("python", "-m", "shoal._driver.pod")

    def __post_init__(self) -> None:
        if not isinstance(self.store, str) or not self.store.startswith(STORE_SCHEMES):
            raise _fail("store", self.store, "pods reach only an object store: s3:// or gs://",
                        'use store="s3://my-bucket/shoal" (and the same with shoal.init)')
        if not isinstance(self.namespace, str) or not is_dns1123_label(self.namespace):
            raise _fail("namespace", self.namespace, "must be a DNS label (a-z, 0-9, '-', at "
                        "most 63)", 'use namespace="ml-research"')
        for name in ("service_account", "task_service_account", "store_secret", "secret_name"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and len(value) <= 253
                                          and _SUBDOMAIN.match(value)):
                guess = re.sub(r"[^a-z0-9.-]+", "-", str(value).lower()).strip("-.")
                raise _fail(name, value, "must be a Kubernetes object name (lower-case DNS "
                            "subdomain)", f"use {guess or 'shoal'!r}")
        for secret in self.image_pull_secrets:
            if not (isinstance(secret, str) and _SUBDOMAIN.match(secret)):
                raise _fail("image_pull_secrets", secret, "must name Secrets", 'e.g. ("regcred",)')
        if self.default_queue is not None and not (
                isinstance(self.default_queue, str) and is_label_value(self.default_queue)
                and self.default_queue):
            raise _fail("default_queue", self.default_queue, "must be a LocalQueue name (a "
                        "label value)", 'use default_queue="research"')
        ttl = self.ttl_seconds_after_finished
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0):
            raise _fail("ttl_seconds_after_finished", ttl, "must be an int >= 0 or None",
                        "use 3600 (an hour), or None to keep finished objects")
        port = self.master_port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise _fail("master_port", port, "must be a port number 1-65535", "use 29500")
        wait = self.master_wait
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait <= 0:
            raise _fail("master_wait", wait, "must be a positive number of seconds", "use 600")
        if not isinstance(self.home, str) or not _ABS_PATH.match(self.home):
            raise _fail("home", self.home, "must be an absolute path", 'use "/var/lib/shoal"')
        for name in ("launcher_command", "driver_command"):
            argv = getattr(self, name)
            if not argv or not all(isinstance(a, str) and a for a in argv):
                raise _fail(name, argv, "must be a non-empty tuple of strings",
                            'e.g. ("python", "-m", "shoal._runtime.node.launcher")')
            object.__setattr__(self, name, tuple(argv))
        object.__setattr__(self, "accelerators", _frozen(
            {k: _frozen(_check_selector(f"accelerators[{k!r}]", v))
             for k, v in _check_mapping("accelerators", self.accelerators).items()}))
        object.__setattr__(self, "interruptible_node_selector", _frozen(_check_selector(
            "interruptible_node_selector", self.interruptible_node_selector)))
        for name in ("gpu_tolerations", "interruptible_tolerations", "image_pull_secrets"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("gpu_tolerations", "interruptible_tolerations"):
            for tol in getattr(self, name):
                if not isinstance(tol, Mapping) or not {"key", "operator"} & set(tol):
                    raise _fail(name, tol, "a toleration is a dict with at least 'key' or "
                                "'operator'", 'e.g. {"key": "nvidia.com/gpu", "operator": '
                                '"Exists", "effect": "NoSchedule"}')

    # --- the driver pod gets its engine's configuration as one JSON variable ---------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; ``KubeConfig.from_dict(c.to_dict()) == c``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                value = {k: dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}
            elif isinstance(value, tuple):
                value = [dict(v) if isinstance(v, Mapping) else v for v in value]
            out[f.name] = value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KubeConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError("KubeConfig", unknown[0], "is not a KubeConfig field",
                            f"use one of {', '.join(sorted(known))}")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in data.items()}
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> KubeConfig:
        return cls.from_dict(json.loads(text))


def _check_mapping(name: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _fail(name, value, "must be a dict with string keys",
                    'e.g. {"H200": {"nvidia.com/gpu.product": "NVIDIA-H200"}}')
    return value


def _check_selector(name: str, value: object) -> Mapping[str, str]:
    for key, label in _check_mapping(name, value).items():
        if not _LABEL_KEY.match(key) or not isinstance(label, str) or not is_label_value(label):
            raise _fail(name, {key: label}, "a node selector maps label keys to label values",
                        'e.g. {"nvidia.com/gpu.product": "NVIDIA-H200"}')
    return value  # type: ignore[return-value]
