"""Where each kind Shoal touches lives in the Kubernetes REST API: the kind → path table.

Pure data and string building, no I/O: `resource_for` names the `Resource` of a kind (with
another version of its group when asked), and `Resource.path` builds its REST path.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

from shoal._engines.kubernetes.api_errors import KubeError

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def full_name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{urllib.parse.quote(name, safe='')}"
        if sub is not None:
            base += f"/{sub}"
        return base


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "pods", "Pod"),
    Resource("", "v1", "services", "Service"),
    Resource("", "v1", "configmaps", "ConfigMap"),
    Resource("", "v1", "secrets", "Secret"),
    Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    Resource("", "v1", "events", "Event"),
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("batch", "v1", "jobs", "Job"),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    Resource("ray.io", "v1", "rayjobs", "RayJob"),
    Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
    Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue"),
    Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False),
    Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False),
)


def resource_for(kind: str, api_version: str | None = None) -> Resource:
    """The resource of ``kind`` (``"JobSet"``, ``"jobsets"``, any case); ``api_version`` picks
    another version of the same group (``"kueue.x-k8s.io/v1beta1"`` on an older Kueue)."""
    wanted = kind.lower()
    for r in RESOURCES:
        if wanted in (r.kind.lower(), r.plural):
            if api_version and api_version != r.api_version:
                group, _, version = api_version.rpartition("/")
                return Resource(group, version, r.plural, r.kind, r.namespaced)
            return r
    known = ", ".join(r.kind for r in RESOURCES)
    raise KubeError(f"kind {kind!r} is not one this client knows; known kinds: {known}")


__all__ = ["RESOURCES", "Obj", "Resource", "resource_for"]
