"""A FAKE Kubernetes API server, for tests only: no API server (nor kind, nor a cluster) runs on
these machines, so the client is tested over real HTTP against this stand-in instead.

It serves, on 127.0.0.1 and a free port, in a thread, just the REST paths Shoal's client uses —
create / get / list / watch / merge-patch / delete of jobsets, jobs, workloads, pods (and their
``log``), serviceaccounts, roles, rolebindings and a few more — with what the real server does
that a client can get wrong: one resourceVersion counter for everything, equality label
selectors and ``metadata.name`` field selectors, chunked watch streams (ADDED for the current
objects when no resourceVersion is given, replay from a resourceVersion, ``timeoutSeconds``,
bookmarks, 410 Expired once history is compacted), bearer-token auth (and optionally TLS with
client certificates), errors as ``Status`` objects (401, 403, 404, 409, 415), foreground /
background / orphan deletion through owner references.

What it does NOT do: validate objects against schemas, run admission webhooks, or act on
objects by itself. The JobSet controller, Kueue and the kubelet are played by `FakeCluster`,
a script that tests drive step by step, writing the same conditions, labels and exit codes the
real controllers write (kubernetes-sigs/jobset v1alpha2, kueue v1beta2), on a fake clock that
moves one second per step — the resolution of Kubernetes timestamps.

Here: the server's lifecycle, its storage (objects, watch history, logs, clock) and garbage
collector. Its HTTP handler is in `fake_rest.py`, `FakeCluster` in `fake_controller.py`; every
name of both can still be imported from here.
"""

from __future__ import annotations

import json
import ssl
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from shoal._engines.kubernetes.resources import Resource
from tests.kubernetes.fake_controller import (
    COMPLETION_INDEX,
    GLOBAL_INDEX,
    JOB_INDEX,
    JOBSET_NAME,
    QUEUE_NAME,
    REPLICATED_JOB,
    RESTART_ATTEMPT,
    FakeCluster,
    set_condition,
)
from tests.kubernetes.fake_rest import _ORPHAN_BY_DEFAULT as _ORPHAN_BY_DEFAULT
from tests.kubernetes.fake_rest import _fields as _fields
from tests.kubernetes.fake_rest import _Handler, merge_patch, selects, status

Obj = dict[str, Any]


# The kinds it serves, described as the client describes them (group, version, plural, kind).
Kind = Resource


KINDS = [
    Kind("", "v1", "pods", "Pod"), Kind("", "v1", "serviceaccounts", "ServiceAccount"),
    Kind("", "v1", "configmaps", "ConfigMap"), Kind("", "v1", "secrets", "Secret"),
    Kind("", "v1", "services", "Service"), Kind("", "v1", "events", "Event"),
    Kind("batch", "v1", "jobs", "Job"),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    Kind("ray.io", "v1", "rayjobs", "RayJob"),
    Kind("kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
    Kind("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue"),
]


@dataclass
class _Event:
    rv: int
    kind: Kind
    namespace: str
    type: str
    obj: Obj


TOKEN = "test-token"  # the bearer token the tests' fakes accept


def _copy(obj: Obj) -> Obj:
    """A deep copy of a stored object. Objects are JSON (they came as JSON, or are written as
    a real server would store them), and a JSON round trip copies a pod about twice as fast
    as ``copy.deepcopy``: the fake copies every pod it stores, lists and tells its watches
    of, which at 2,048 pods was seconds of its time (benchmarks/_scale/kube.py)."""
    copied: Obj = json.loads(json.dumps(obj))
    return copied


class FakeApiServer:
    """The fake server; ``url`` once started. ``token`` is the only bearer token accepted."""

    def __init__(self, *, token: str = TOKEN, kinds: list[Kind] | None = None,
                 tls: tuple[str, str] | None = None, client_ca: str | None = None,
                 gc_delay: float = 0.05) -> None:
        self.token = token
        self.kinds = {(k.group, k.version, k.plural): k for k in (kinds or KINDS)}
        self.tls, self.client_ca, self.gc_delay = tls, client_ca, gc_delay
        self.cond = threading.Condition()
        self.rv = 100
        self.compacted = 0  # watches from a resourceVersion at or below this get 410
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, namespace, name)
        self.events: list[_Event] = []
        self.logs: dict[tuple[str, str, str], list[str]] = {}  # (namespace, pod, container)
        self.forbidden: set[tuple[str, str]] = set()  # (verb, plural) RBAC says no to
        self.requests: list[tuple[str, str]] = []  # (method, path?query) as received
        self.clock = datetime(2026, 1, 1, tzinfo=timezone.utc)
        self.stopping = False
        self._drops = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        server = self

        class Handler(_Handler):
            fake = server

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            if self.client_ca:
                ctx.load_verify_locations(self.client_ca)
                ctx.verify_mode = ssl.CERT_OPTIONAL
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="fake-apiserver")
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the fake first"
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests (and FakeCluster) do to it --------------------------------------------------
    def now(self) -> str:
        return self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")

    def tick(self, seconds: float = 1) -> str:
        self.clock += timedelta(seconds=seconds)
        return self.now()

    def kind(self, plural: str) -> Kind:
        return next(k for k in self.kinds.values() if k.plural == plural)

    def get(self, plural: str, name: str, namespace: str = "default") -> Obj | None:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            return _copy(obj) if obj else None

    def all(self, plural: str, namespace: str | None = None,
            selector: str | None = None) -> list[Obj]:
        with self.cond:
            return [_copy(o) for (p, ns, _), o in self.objects.items()
                    if p == plural and namespace in (None, ns)
                    and selects(selector, o["metadata"].get("labels") or {})]

    def put(self, plural: str, obj: Obj, event: str | None = None) -> Obj:
        """Store ``obj`` (new or changed) with a new resourceVersion and tell the watchers."""
        with self.cond:
            kind = self.kind(plural)
            meta = obj.setdefault("metadata", {})
            ns = meta.setdefault("namespace", "default") if kind.namespaced else ""
            key = (plural, ns, meta["name"])
            if event is None:
                event = "MODIFIED" if key in self.objects else "ADDED"
            if event == "ADDED":
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", self.now())
                meta.setdefault("generation", 1)
                obj.setdefault("apiVersion", kind.api_version)
                obj.setdefault("kind", kind.kind)
            self.rv += 1
            meta["resourceVersion"] = str(self.rv)
            self.objects[key] = obj
            self.events.append(_Event(self.rv, kind, ns, event, _copy(obj)))
            self.cond.notify_all()
            return _copy(obj)

    def remove(self, plural: str, name: str, namespace: str = "default") -> Obj | None:
        with self.cond:
            obj = self.objects.pop((plural, namespace, name), None)
            if obj is not None:
                self.rv += 1
                obj["metadata"]["resourceVersion"] = str(self.rv)
                self.events.append(_Event(self.rv, self.kind(plural), namespace, "DELETED",
                                          _copy(obj)))
                self.cond.notify_all()
            return obj

    def append_log(self, namespace: str, pod: str, container: str, *lines: str) -> None:
        with self.cond:
            self.logs.setdefault((namespace, pod, container), []).extend(lines)
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget the watch history so far, as etcd compaction does: older watches get 410."""
        with self.cond:
            self.compacted = self.rv
            self.events.clear()

    def drop_watches(self) -> None:
        """Cut every open watch stream mid-flight, as a restarting API server would."""
        with self.cond:
            self._drops += 1
            self.cond.notify_all()

    # -- deletion with owner references (the garbage collector's part) --------------------------
    def dependents(self, uid: str) -> list[tuple[str, Obj]]:
        with self.cond:
            return [(p, _copy(o)) for (p, _, _), o in self.objects.items()
                    if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences", []))]

    def collect(self, plural: str, obj: Obj, policy: str) -> None:
        """Delete ``obj`` with ``policy`` as the garbage collector would, dependents first for
        Foreground (the owner stays, marked, until they are gone)."""
        meta = obj["metadata"]
        if policy == "Orphan":
            for dep_plural, dep in self.dependents(meta["uid"]):
                dep["metadata"]["ownerReferences"] = [
                    r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != meta["uid"]]
                self.put(dep_plural, dep)
            self.remove(plural, meta["name"], meta.get("namespace", ""))
            return
        if policy == "Background":
            self.remove(plural, meta["name"], meta.get("namespace", ""))
        for dep_plural, dep in self.dependents(meta["uid"]):
            self._stop_pod(dep_plural, dep)
            self.collect(dep_plural, dep, policy)
        if policy == "Foreground":
            self.remove(plural, meta["name"], meta.get("namespace", ""))

    def _stop_pod(self, plural: str, pod: Obj) -> None:
        """A pod asked to stop: deletionTimestamp, then its running containers end (SIGTERM)."""
        if plural != "pods":
            return
        grace = 30
        pod["metadata"]["deletionTimestamp"] = (self.clock + timedelta(seconds=grace)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        self.put("pods", pod)
        finished = self.tick()
        for cs in pod["status"].get("containerStatuses", []):
            running = cs["state"].get("running")
            if running:
                cs["state"] = {"terminated": {"exitCode": 143, "reason": "Error",
                                              "startedAt": running["startedAt"],
                                              "finishedAt": finished}}
                cs["ready"] = False
        if pod["status"].get("phase") == "Running":
            pod["status"]["phase"] = "Failed"
        self.put("pods", pod)


def write_kubeconfig(path: Path, server: str, token: str, namespace: str = "default") -> Path:
    """A kubeconfig with one context ("dev") for ``server``, as a user has one."""
    path.write_text(f"""
apiVersion: v1
kind: Config
current-context: dev
clusters: [{{name: dev, cluster: {{server: "{server}"}}}}]
users: [{{name: dev, user: {{token: {token}}}}}]
contexts: [{{name: dev, context: {{cluster: dev, user: dev, namespace: {namespace}}}}}]
""")
    return path


def events_of(iterator: Iterator[Any], n: int) -> list[Any]:
    """The next ``n`` items of an iterator."""
    return [next(iterator) for _ in range(n)]


__all__ = [
    "COMPLETION_INDEX", "GLOBAL_INDEX", "JOBSET_NAME", "JOB_INDEX", "KINDS", "QUEUE_NAME",
    "REPLICATED_JOB", "RESTART_ATTEMPT", "FakeApiServer", "FakeCluster", "Kind", "events_of",
    "merge_patch", "selects", "set_condition", "status", "write_kubeconfig",
]
