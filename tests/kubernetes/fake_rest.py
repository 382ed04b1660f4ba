"""The REST side of the FAKE Kubernetes API server (`fake_apiserver.FakeApiServer`), for tests
only: no real API server runs on these machines.

`_Handler` answers the HTTP requests: routing of ``/api`` and ``/apis`` paths, bearer-token (or
client-certificate) auth, RBAC refusals a test asked for, and the verbs — create, get, list,
watch (chunked streams with replay, bookmarks and 410 Expired), merge-patch, delete (with the
propagation policies) and a pod's ``log`` (followed or not). Errors go out as ``Status``
objects, as from the real server. The stored objects, the clock and the garbage collector live
in `FakeApiServer`; the controllers are played by `fake_controller.FakeCluster`.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import random
import socket
import ssl
import string
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from tests.kubernetes.fake_apiserver import FakeApiServer, Kind, _Event

Obj = dict[str, Any]

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
                                  f'{kind.full_name} is forbidden: User "system:serviceaccount:'
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
                return self._fail(404, "NotFound", f'{kind.full_name} "{name}" not found',
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
                                  f'{kind.full_name} "{meta["name"]}" already exists',
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
                    409, "Conflict", f'Operation cannot be fulfilled on {kind.full_name} '
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
                # The history is in resourceVersion order: start past the cursor, or
                # every wake of every watch would rescan it all (1,024 pods: seconds).
                start = bisect.bisect_right(fake.events, cursor, key=lambda e: e.rv)
                batch = [e for e in fake.events[start:] if matches(e)]
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

