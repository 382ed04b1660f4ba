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
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import socket
import ssl
import string
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Obj = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:  # how the real server names it in messages
        return f"{self.plural}.{self.group}" if self.group else self.plural


KINDS = [
    Kind("", "v1", "pods", "Pod"), Kind("", "v1", "serviceaccounts", "ServiceAccount"),
    Kind("", "v1", "configmaps", "ConfigMap"), Kind("", "v1", "secrets", "Secret"),
    Kind("", "v1", "services", "Service"), Kind("", "v1", "events", "Event"),
    Kind("batch", "v1", "jobs", "Job"),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Kind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    Kind("kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
    Kind("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue"),
]
# Deleting these without a propagationPolicy orphans their dependents (a Kubernetes legacy).
_ORPHAN_BY_DEFAULT = {"jobs"}


def status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure" if code >= 400 else "Success", "message": message,
            "reason": reason, "details": details or {}, "code": code}


def selects(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, comma-separated."""
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        else:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class _Event:
    rv: int
    kind: Kind
    namespace: str
    type: str
    obj: Obj


class FakeApiServer:
    """The fake server; ``url`` once started. ``token`` is the only bearer token accepted."""

    def __init__(self, *, token: str = "test-token", kinds: list[Kind] | None = None,
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
            return copy.deepcopy(obj) if obj else None

    def all(self, plural: str, namespace: str | None = None,
            selector: str | None = None) -> list[Obj]:
        with self.cond:
            return [copy.deepcopy(o) for (p, ns, _), o in self.objects.items()
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
            self.events.append(_Event(self.rv, kind, ns, event, copy.deepcopy(obj)))
            self.cond.notify_all()
            return copy.deepcopy(obj)

    def remove(self, plural: str, name: str, namespace: str = "default") -> Obj | None:
        with self.cond:
            obj = self.objects.pop((plural, namespace, name), None)
            if obj is not None:
                self.rv += 1
                obj["metadata"]["resourceVersion"] = str(self.rv)
                self.events.append(_Event(self.rv, self.kind(plural), namespace, "DELETED",
                                          copy.deepcopy(obj)))
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
            return [(p, copy.deepcopy(o)) for (p, _, _), o in self.objects.items()
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


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ---------------------------------------------------------------------------
    def _send(self, code: int, body: Obj | str) -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if isinstance(body, dict)
                         else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fail(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        self._send(code, status(code, reason, message, details))

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _abort(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.fake.token}":
            return True
        if isinstance(self.connection, ssl.SSLSocket):
            return bool(self.connection.getpeercert())  # a client certificate the CA signed
        return False

    def _route(self) -> tuple[Kind, str, str | None, str | None, dict[str, str]] | None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        segs = [s for s in parts.path.split("/") if s]
        if segs[:1] == ["api"] and len(segs) >= 2:
            gv, rest = ("", segs[1]), segs[2:]
        elif segs[:1] == ["apis"] and len(segs) >= 3:
            gv, rest = (segs[1], segs[2]), segs[3:]
        else:
            return None
        ns = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        kind = self.fake.kinds.get((*gv, rest[0]))
        if kind is None or kind.namespaced != bool(ns):
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return kind, ns, name, sub, query

    def _handle(self, method: str) -> None:
        fake = self.fake
        with fake.cond:
            fake.requests.append((method, self.path))
        try:
            if not self._authorized():
                return self._fail(401, "Unauthorized", "Unauthorized")
            if self.path == "/version":
                return self._send(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake"})
            route = self._route()
            if route is None:
                return self._fail(404, "NotFound", "the server could not find the requested "
                                                   "resource")
            kind, ns, name, sub, query = route
            verb = {"POST": "create", "GET": "get" if name else "list", "PATCH": "patch",
                    "DELETE": "delete"}[method]
            if query.get("watch") in ("1", "true"):
                verb = "watch"
            if (verb, kind.plural) in fake.forbidden:
                return self._fail(403, "Forbidden",
                                  f'{kind.qualified} is forbidden: User "system:serviceaccount:'
                                  f'{ns}:shoal" cannot {verb} resource "{kind.plural}" in API '
                                  f'group "{kind.group}" in the namespace "{ns}"',
                                  {"group": kind.group, "kind": kind.plural})
            if method == "POST" and name is None:
                return self._create(kind, ns)
            if method == "GET" and name is None:
                return self._watch(kind, ns, query) if verb == "watch" else self._list(kind, ns,
                                                                                      query)
            if name is None:
                return self._fail(405, "MethodNotAllowed", "the server does not allow this "
                                                           "method on the requested resource")
            current = fake.get(kind.plural, name, ns)
            if current is None:
                return self._fail(404, "NotFound", f'{kind.qualified} "{name}" not found',
                                  {"name": name, "group": kind.group, "kind": kind.plural})
            if method == "GET" and sub == "log" and kind.plural == "pods":
                return self._log(current, query)
            if method == "GET" and sub is None:
                return self._send(200, current)
            if method == "PATCH" and sub is None:
                return self._patch(kind, current)
            if method == "DELETE" and sub is None:
                return self._delete(kind, current, query)
            return self._fail(404, "NotFound", "the server could not find the requested "
                                               "resource")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- verbs ------------------------------------------------------------------------------
    def _create(self, kind: Kind, ns: str) -> None:
        obj = self._body() or {}
        if obj.get("kind") != kind.kind:
            return self._fail(400, "BadRequest", f"the kind {obj.get('kind')!r} does not match "
                                                 f"the path's {kind.kind!r}")
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(
                random.choices(string.ascii_lowercase + string.digits, k=5))
        if not meta.get("name"):
            return self._fail(422, "Invalid", f"{kind.kind}.{kind.group} is invalid: "
                                              f"metadata.name: Required value",
                              {"kind": kind.kind, "causes": [{"field": "metadata.name",
                                                              "message": "Required value"}]})
        if ns:
            meta["namespace"] = ns
        with self.fake.cond:
            if self.fake.get(kind.plural, meta["name"], ns) is not None:
                return self._fail(409, "AlreadyExists",
                                  f'{kind.qualified} "{meta["name"]}" already exists',
                                  {"name": meta["name"], "group": kind.group,
                                   "kind": kind.plural})
            for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
                meta.pop(field, None)
            stored = self.fake.put(kind.plural, obj, "ADDED")
            # The controllers react at once (before the answer, so a test's next step never
            # races them); the answer is the object as created, as from the real server.
            cluster = getattr(self.fake, "cluster", None)
            if cluster is not None:
                cluster.created(kind.plural, copy.deepcopy(stored))
        self._send(201, stored)

    def _list(self, kind: Kind, ns: str, query: dict[str, str]) -> None:
        with self.fake.cond:
            items = [o for o in self.fake.all(kind.plural, ns or None, query.get("labelSelector"))
                     if _fields(query.get("fieldSelector"), o)]
            rv = self.fake.rv
        self._send(200, {"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                         "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _patch(self, kind: Kind, current: Obj) -> None:
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self._fail(415, "UnsupportedMediaType",
                              f"the body of the request was in an unknown format - accepted "
                              f"media types include: application/merge-patch+json "
                              f"(got {self.headers.get('Content-Type')})")
        patch = self._body() or {}
        asked_rv = (patch.get("metadata") or {}).get("resourceVersion")
        with self.fake.cond:
            current = self.fake.get(kind.plural, current["metadata"]["name"],
                                    current["metadata"].get("namespace", "")) or current
            if asked_rv and asked_rv != current["metadata"]["resourceVersion"]:
                return self._fail(
                    409, "Conflict", f'Operation cannot be fulfilled on {kind.qualified} '
                    f'"{current["metadata"]["name"]}": the object has been modified; please '
                    f'apply your changes to the latest version and try again',
                    {"name": current["metadata"]["name"], "group": kind.group,
                     "kind": kind.plural})
            merged = merge_patch(current, patch)
            if merged.get("spec") != current.get("spec"):
                merged["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            stored = self.fake.put(kind.plural, merged, "MODIFIED")
        self._send(200, stored)

    def _delete(self, kind: Kind, current: Obj, query: dict[str, str]) -> None:
        options = self._body() or {}
        policy = options.get("propagationPolicy") or query.get("propagationPolicy") or (
            "Orphan" if kind.plural in _ORPHAN_BY_DEFAULT else "Background")
        meta = current["metadata"]
        if policy == "Foreground":
            if "deletionTimestamp" not in meta:
                meta["deletionTimestamp"] = self.fake.now()
                meta["deletionGracePeriodSeconds"] = 0
                meta["finalizers"] = [*meta.get("finalizers", []), "foregroundDeletion"]
                current = self.fake.put(kind.plural, current, "MODIFIED")
            self._send(200, current)
        else:
            self._send(200, {**status(200, "", ""), "details": {
                "name": meta["name"], "group": kind.group, "kind": kind.plural,
                "uid": meta["uid"]}})
        # The garbage collector works after the answer, as the real one does.
        timer = threading.Timer(self.fake.gc_delay, self.fake.collect,
                                (kind.plural, current, policy))
        timer.daemon = True
        timer.start()

    def _watch(self, kind: Kind, ns: str, query: dict[str, str]) -> None:
        fake = self.fake
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        selector, fields = query.get("labelSelector"), query.get("fieldSelector")
        asked = query.get("resourceVersion")

        def matches(e: _Event) -> bool:
            return (e.kind == kind and ns in ("", e.namespace)
                    and selects(selector, e.obj["metadata"].get("labels") or {})
                    and _fields(fields, e.obj))

        with fake.cond:
            drops = fake._drops
            if asked in (None, "", "0"):
                cursor = fake.rv
                first = [{"type": "ADDED", "object": o} for o in fake.all(kind.plural, ns or None,
                                                                          selector)
                         if _fields(fields, o)]
            elif int(asked) < fake.compacted:
                cursor, first = fake.rv, None
            else:
                cursor, first = int(asked), []
        self._start_stream("application/json")
        if first is None:
            err = status(410, "Expired", f"too old resource version: {asked} ({fake.compacted})")
            self._chunk(json.dumps({"type": "ERROR", "object": err}).encode() + b"\n")
            return self._end_stream()
        for event in first:
            self._chunk(json.dumps(event).encode() + b"\n")
        while True:
            with fake.cond:
                while (not fake.stopping and fake._drops == drops
                       and time.monotonic() < deadline and fake.rv == cursor):
                    fake.cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))
                batch = [e for e in fake.events if e.rv > cursor and matches(e)]
                cursor = fake.rv
                dropped, stopping = fake._drops != drops, fake.stopping
            if dropped:
                return self._abort()
            for e in batch:
                self._chunk(json.dumps({"type": e.type, "object": e.obj}).encode() + b"\n")
            if stopping or time.monotonic() >= deadline:
                if query.get("allowWatchBookmarks") == "true":
                    mark = {"kind": kind.kind, "apiVersion": kind.api_version,
                            "metadata": {"resourceVersion": str(cursor)}}
                    self._chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
                return self._end_stream()

    def _log(self, pod: Obj, query: dict[str, str]) -> None:
        fake = self.fake
        meta = pod["metadata"]
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        container = query.get("container")
        if container is None and len(names) > 1:
            return self._fail(400, "BadRequest", f"a container name must be specified for pod "
                                                 f"{meta['name']}, choose one of: {names}")
        container = container or names[0]
        if container not in names:
            return self._fail(400, "BadRequest", f'container "{container}" in pod '
                                                 f'"{meta["name"]}" is not valid')
        key = (meta["namespace"], meta["name"], container)
        with fake.cond:
            lines = list(fake.logs.get(key, []))
            sent = len(lines)
        if query.get("tailLines"):
            lines = lines[-int(query["tailLines"]):] if int(query["tailLines"]) else []
        if query.get("follow") != "true":
            return self._send(200, "".join(line + "\n" for line in lines))
        self._start_stream("text/plain")
        for line in lines:
            self._chunk(line.encode() + b"\n")
        while True:
            with fake.cond:
                current = fake.objects.get(("pods", meta["namespace"], meta["name"]))
                new = fake.logs.get(key, [])[sent:]
                ended = current is None or current["status"].get("phase") in ("Succeeded",
                                                                              "Failed")
                if not new and not ended and not fake.stopping:
                    fake.cond.wait(0.5)
                    continue
            for line in new:
                self._chunk(line.encode() + b"\n")
            sent += len(new)
            if ended or fake.stopping:
                return self._end_stream()


def _fields(selector: str | None, obj: Obj) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, value = term.replace("==", "=").split("=", 1)
        if key == "metadata.name" and obj["metadata"].get("name") != value:
            return False
        if key == "metadata.namespace" and obj["metadata"].get("namespace") != value:
            return False
    return True


# -- the controllers, scripted ---------------------------------------------------------------------
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"


def set_condition(obj: Obj, type_: str, state: str, reason: str, message: str, now: str) -> None:
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conditions:
        if c["type"] == type_:
            if c["status"] != state:
                c["lastTransitionTime"] = now
            c.update(status=state, reason=reason, message=message)
            return
    conditions.append({"type": type_, "status": state, "reason": reason, "message": message,
                       "lastTransitionTime": now})


class FakeCluster:
    """The JobSet controller, Kueue and the kubelet, as a script a test drives.

    ``server.cluster = FakeCluster(server)`` makes JobSets created through the API get their
    Suspended condition and (with a queue-name label) a pending Kueue Workload, as the real
    controllers do on their own. Everything after that happens when the test says so:
    `admit`, `fail_node`, `restart`, `evict`, `requeue`, `succeed`, `fail`, `expire`.
    """

    def __init__(self, server: FakeApiServer) -> None:
        self.s = server
        server.cluster = self  # type: ignore[attr-defined]
        self.pending_message = ("couldn't assign flavors to pod set node: insufficient unused "
                                "quota for nvidia.com/gpu in flavor h200, 16 more needed")

    # -- reactions to API calls ----------------------------------------------------------------
    def created(self, plural: str, obj: Obj) -> None:
        if plural != "jobsets":
            return
        now = self.s.now()
        if obj["spec"].get("suspend"):
            set_condition(obj, "Suspended", "True", "SuspendedJobs", "jobset is suspended", now)
        obj.setdefault("status", {}).update(
            restarts=0, replicatedJobsStatus=self._rj_status(obj, "suspended"))
        self.s.put("jobsets", obj)
        queue = (obj["metadata"].get("labels") or {}).get(QUEUE_NAME)
        if queue:
            self._create_workload(obj, queue)

    # -- lookups -------------------------------------------------------------------------------
    def jobset(self, name: str, ns: str = "default") -> Obj:
        js = self.s.get("jobsets", name, ns)
        assert js is not None, f"no JobSet {name}"
        return js

    def workload(self, name: str, ns: str = "default") -> Obj:
        uid = self.jobset(name, ns)["metadata"]["uid"]
        for w in self.s.all("workloads", ns):
            if any(r["uid"] == uid for r in w["metadata"].get("ownerReferences", [])):
                return w
        raise AssertionError(f"no Workload for JobSet {name}")

    def pods(self, name: str, attempt: int | None = None, ns: str = "default") -> list[Obj]:
        selector = f"{JOBSET_NAME}={name}" + (
            f",{RESTART_ATTEMPT}={attempt}" if attempt is not None else "")
        return sorted(self.s.all("pods", ns, selector),
                      key=lambda p: int(p["metadata"]["labels"][COMPLETION_INDEX]))

    def node_pod(self, name: str, node: int, ns: str = "default") -> Obj:
        attempt = self.jobset(name, ns)["status"].get("restarts", 0)
        return next(p for p in self.pods(name, attempt, ns)
                    if int(p["metadata"]["labels"][COMPLETION_INDEX]) == node
                    and p["status"]["phase"] in ("Running", "Pending", "Failed"))

    # -- Kueue ---------------------------------------------------------------------------------
    def _create_workload(self, js: Obj, queue: str) -> None:
        meta = js["metadata"]
        pod_sets = [{"name": rj["name"], "count": rj.get("replicas", 1) * rj["template"]["spec"]
                     .get("parallelism", 1)} for rj in js["spec"]["replicatedJobs"]]
        wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
            "name": f"jobset-{meta['name']}-{meta['uid'][:5]}", "namespace": meta["namespace"],
            "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                 "name": meta["name"], "uid": meta["uid"], "controller": True,
                                 "blockOwnerDeletion": True}]},
            "spec": {"queueName": queue, "podSets": pod_sets, "priority": 0, "active": True},
            "status": {}}
        set_condition(wl, "QuotaReserved", "False", "Pending", self.pending_message,
                      self.s.now())
        self.s.put("workloads", wl, "ADDED")

    def admit(self, name: str, cluster_queue: str = "team-a", ns: str = "default") -> None:
        """Kueue reserves quota and admits; the JobSet resumes; one Running pod per node."""
        now = self.s.tick()
        wl = self.workload(name, ns)
        wl["status"]["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [
            {"name": ps["name"], "count": ps["count"], "flavors": {"nvidia.com/gpu": "h200"}}
            for ps in wl["spec"]["podSets"]]}
        set_condition(wl, "QuotaReserved", "True", "QuotaReserved",
                      f"Quota reserved in ClusterQueue {cluster_queue}", now)
        set_condition(wl, "Admitted", "True", "Admitted", "The workload is admitted", now)
        for c in wl["status"]["conditions"]:
            if c["type"] in ("Evicted", "Preempted") and c["status"] == "True":
                c.update(status="False", reason="QuotaReserved",
                         message="Previously: " + c["message"], lastTransitionTime=now)
        self.s.put("workloads", wl)
        js = self.jobset(name, ns)
        js["spec"]["suspend"] = False
        set_condition(js, "Suspended", "False", "ResumeJobs", "jobset is resumed", now)
        self.s.put("jobsets", js)
        self._start_pods(name, ns)

    def evict(self, name: str, ns: str = "default") -> None:
        """Kueue preempts the workload for a higher-priority one: Evicted (reason Preempted),
        the JobSet is suspended, its pods are stopped (SIGTERM) and deleted."""
        now = self.s.tick()
        wl = self.workload(name, ns)
        message = ("Preempted to accommodate a workload (UID: 5f1c, JobUID: 9a2e) due to "
                   "prioritization in the ClusterQueue")
        set_condition(wl, "Evicted", "True", "Preempted", message, now)
        set_condition(wl, "Preempted", "True", "InClusterQueue", message, now)
        stats = wl["status"].setdefault("schedulingStats", {"evictions": []})
        stats["evictions"] = [{"reason": "Preempted", "underlyingCause": "InClusterQueue",
                               "count": 1 + sum(e["count"] for e in stats["evictions"])}]
        self.s.put("workloads", wl)
        js = self.jobset(name, ns)
        js["spec"]["suspend"] = True
        set_condition(js, "Suspended", "True", "SuspendedJobs", "jobset is suspended", now)
        js["status"]["replicatedJobsStatus"] = self._rj_status(js, "suspended")
        self.s.put("jobsets", js)
        for pod in self.pods(name, ns=ns):
            if pod["status"]["phase"] == "Running":
                self.s.append_log(ns, pod["metadata"]["name"], self._container(pod),
                                  "SIGTERM: preempted, saving a checkpoint")
                self.s._stop_pod("pods", pod)
                self.s.remove("pods", pod["metadata"]["name"], ns)

    def requeue(self, name: str, ns: str = "default", message: str | None = None) -> None:
        """Kueue, once the pods are gone, releases the quota and queues the workload again."""
        now = self.s.tick()
        wl = self.workload(name, ns)
        wl["status"].pop("admission", None)
        set_condition(wl, "QuotaReserved", "False", "Pending",
                      message or self.pending_message, now)
        set_condition(wl, "Admitted", "False", "NoReservation",
                      "The workload has no reservation", now)
        set_condition(wl, "Requeued", "True", "Preempted", "Preempted", now)
        self.s.put("workloads", wl)

    # -- the JobSet controller and the kubelet ---------------------------------------------------
    def _rj_status(self, js: Obj, jobs: str = "none") -> list[Obj]:
        """replicatedJobsStatus with every Job ``ready``, ``succeeded``, ``suspended`` or not
        started yet (``none``)."""
        rows = []
        for rj in js["spec"]["replicatedJobs"]:
            n = rj.get("replicas", 1)
            rows.append({"name": rj["name"], "ready": n if jobs == "ready" else 0,
                         "succeeded": n if jobs == "succeeded" else 0, "failed": 0,
                         "active": n if jobs == "ready" else 0,
                         "suspended": n if jobs == "suspended" else 0})
        return rows

    def _container(self, pod: Obj) -> str:
        return str(pod["spec"]["containers"][0]["name"])

    def _start_pods(self, name: str, ns: str) -> None:
        js = self.jobset(name, ns)
        attempt = js["status"].get("restarts", 0)
        now = self.s.now()
        global_index = 0
        for rj in js["spec"]["replicatedJobs"]:
            job_spec = rj["template"]["spec"]
            pod_spec = copy.deepcopy(job_spec.get("template", {}).get("spec") or {})
            pod_spec.setdefault("containers", [{"name": "node", "image": "shoal:test"}])
            for job_index in range(rj.get("replicas", 1)):
                job_name = f"{name}-{rj['name']}-{job_index}"
                job = self.s.get("jobs", job_name, ns)
                if job is None or job["metadata"]["labels"][RESTART_ATTEMPT] != str(attempt):
                    if job is not None:
                        self.s.remove("jobs", job_name, ns)
                    job = self.s.put("jobs", {"metadata": {
                        "name": job_name, "namespace": ns,
                        "labels": {JOBSET_NAME: name, REPLICATED_JOB: rj["name"],
                                   JOB_INDEX: str(job_index), RESTART_ATTEMPT: str(attempt)},
                        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                             "kind": "JobSet", "name": name,
                                             "uid": js["metadata"]["uid"], "controller": True,
                                             "blockOwnerDeletion": True}]},
                        "spec": copy.deepcopy(job_spec), "status": {"active": 0}}, "ADDED")
                for index in range(job_spec.get("parallelism", 1)):
                    node = job_index * job_spec.get("parallelism", 1) + index
                    labels = {JOBSET_NAME: name, REPLICATED_JOB: rj["name"],
                              JOB_INDEX: str(job_index), GLOBAL_INDEX: str(global_index),
                              RESTART_ATTEMPT: str(attempt), COMPLETION_INDEX: str(index),
                              "batch.kubernetes.io/job-name": job_name,
                              "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
                    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
                    pod = {"metadata": {
                        "name": f"{job_name}-{index}-{suffix}", "namespace": ns,
                        "labels": labels, "annotations": dict(labels),
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": job_name, "uid": job["metadata"]["uid"],
                                             "controller": True, "blockOwnerDeletion": True}]},
                        "spec": {**copy.deepcopy(pod_spec), "nodeName": f"gpu-node-{node}",
                                 "hostname": f"{job_name}-{index}", "subdomain": name},
                        "status": {"phase": "Running", "startTime": now,
                                   "podIP": f"10.0.{attempt}.{node + 10}",
                                   "conditions": [{"type": "Ready", "status": "True"}],
                                   "containerStatuses": [
                                       {"name": c["name"], "ready": True, "restartCount": 0,
                                        "image": c.get("image", ""),
                                        "state": {"running": {"startedAt": now}}}
                                       for c in pod_spec["containers"]]}}
                    pod = self.s.put("pods", pod, "ADDED")
                    self.s.append_log(ns, pod["metadata"]["name"], self._container(pod),
                                      f"shoal-node {node}: restart attempt {attempt}, "
                                      f"on gpu-node-{node}",
                                      f"node {node}: step 1")
                global_index += 1
        js["status"]["replicatedJobsStatus"] = self._rj_status(js, "ready")
        self.s.put("jobsets", js)

    def fail_node(self, name: str, node: int, exit_code: int = 137, reason: str = "Error",
                  ns: str = "default", last_words: str | None = None) -> Obj:
        """The container of ``node`` ends with ``exit_code`` (137: SIGKILL, e.g. a kernel OOM
        kill or a dead GPU); its pod fails. Returns the pod."""
        finished = self.s.tick()
        pod = self.node_pod(name, node, ns)
        container = self._container(pod)
        self.s.append_log(ns, pod["metadata"]["name"], container,
                          last_words or f"node {node}: CUDA error: an illegal memory access")
        for cs in pod["status"]["containerStatuses"]:
            started = cs["state"]["running"]["startedAt"]
            cs["state"] = {"terminated": {"exitCode": exit_code, "reason": reason,
                                          "startedAt": started, "finishedAt": finished}}
            cs["ready"] = False
        pod["status"]["phase"] = "Failed"
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        return self.s.put("pods", pod)

    def restart(self, name: str, ns: str = "default") -> None:
        """The JobSet controller's failure policy: restarts + 1, the attempt's Jobs deleted
        (their pods stopped and gone: BlockingRecreate), new Jobs and pods for the next."""
        self.s.tick()
        js = self.jobset(name, ns)
        old = js["status"].get("restarts", 0)
        js["status"]["restarts"] = old + 1
        js["status"]["restartsCountTowardsMax"] = old + 1
        js["status"]["replicatedJobsStatus"] = self._rj_status(js)
        self.s.put("jobsets", js)
        for job in self.s.all("jobs", ns, f"{JOBSET_NAME}={name},{RESTART_ATTEMPT}={old}"):
            self.s.collect("jobs", job, "Foreground")
        self.s.tick()
        self._start_pods(name, ns)

    def succeed(self, name: str, ns: str = "default") -> None:
        """Every node's container exits 0: the JobSet completes, Kueue finishes the Workload."""
        now = self.s.tick()
        js = self.jobset(name, ns)
        for pod in self.pods(name, js["status"].get("restarts", 0), ns):
            if pod["status"]["phase"] != "Running":
                continue
            self.s.append_log(ns, pod["metadata"]["name"], self._container(pod),
                              "training done")
            for cs in pod["status"]["containerStatuses"]:
                cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed",
                                              "startedAt": cs["state"]["running"]["startedAt"],
                                              "finishedAt": now}}
                cs["ready"] = False
            pod["status"]["phase"] = "Succeeded"
            self.s.put("pods", pod)
        js["status"]["replicatedJobsStatus"] = self._rj_status(js, "succeeded")
        js["status"]["terminalState"] = "Completed"
        set_condition(js, "Completed", "True", "AllJobsCompleted",
                      "jobset completed successfully", now)
        self.s.put("jobsets", js)
        self._finish(name, ns, "Succeeded", "jobset completed successfully", now)

    def fail(self, name: str, ns: str = "default", reason: str = "ReachedMaxRestarts",
             message: str = "jobset failed due to reaching max number of restarts") -> None:
        now = self.s.tick()
        js = self.jobset(name, ns)
        js["status"]["terminalState"] = "Failed"
        set_condition(js, "Failed", "True", reason, message, now)
        self.s.put("jobsets", js)
        self._finish(name, ns, "Failed", message, now)

    def _finish(self, name: str, ns: str, reason: str, message: str, now: str) -> None:
        with contextlib.suppress(AssertionError):
            wl = self.workload(name, ns)
            set_condition(wl, "Finished", "True", reason, message, now)
            self.s.put("workloads", wl)

    def expire(self, name: str, ns: str = "default") -> None:
        """ttlSecondsAfterFinished ran out: the JobSet and everything it owns are deleted."""
        self.s.tick()
        self.s.collect("jobsets", self.jobset(name, ns), "Background")


def wait_for(predicate: Any, timeout: float = 5.0, what: str = "a condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (the fake's GC runs in a timer)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def events_of(iterator: Iterator[Any], n: int) -> list[Any]:
    """The next ``n`` items of an iterator."""
    return [next(iterator) for _ in range(n)]
