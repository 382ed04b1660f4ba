"""The Kubernetes API over plain HTTP: the only module of this engine that talks to a cluster.

No dependency on the ``kubernetes`` package: the few REST calls Shoal needs (create, get, patch,
list, delete, watch, pod logs) are ``http.client`` requests carrying JSON. Every failure of
sockets, TLS, HTTP or JSON is caught here and becomes one of the errors drawn in `api_errors`
(through its `unreachable` and `status_error`); the rest of the engine sees only that tree.

Beside it: `kubeconfig` (where the server and credentials come from: kubeconfig files, the
pod's service account, exec plugins), `resources` (the kind → REST path table) and
`api_errors` (the errors).
"""

from __future__ import annotations

import builtins
import contextlib
import http.client
import json
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from shoal._engines.kubernetes import kubeconfig
from shoal._engines.kubernetes.api_errors import (
    KubeApiError,
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeUnauthorized,
    KubeUnreachable,
    status_error,
    unreachable,
)
from shoal._engines.kubernetes.kubeconfig import SERVICE_ACCOUNT_DIR, TokenSource, static_token
from shoal._engines.kubernetes.resources import RESOURCES, Obj, Resource, resource_for

# A watch asks the server to end each stream after this many seconds, then reconnects from the
# last resourceVersion it saw (the API server itself caps streams at ~30-60 min).
WATCH_WINDOW = 240
# Reconnection attempts of a watch whose server stopped answering, before giving up.
WATCH_RETRIES = 4


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ``type`` is ADDED, MODIFIED or DELETED; ``object`` the object."""

    type: str
    object: Obj

    @property
    def name(self) -> str:
        return str(self.object.get("metadata", {}).get("name", ""))


# -- streams -------------------------------------------------------------------------------------
class _Stream:
    """A streaming response (watch events, followed logs) read line by line; ``close()`` may be
    called from another thread and ends a blocked read."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                 server: str, what: str) -> None:
        self._conn, self._resp, self._server, self._what = conn, resp, server, what
        self._lock = threading.Lock()
        self._reading = False
        self.closed = False

    def lines(self) -> Iterator[bytes]:
        with self._lock:
            if self.closed:
                return
            self._reading = True
        try:
            while not self.closed:
                line = self._resp.readline()
                if not line:
                    return
                if line.strip():
                    yield line
        except (OSError, ValueError, AttributeError, http.client.HTTPException) as e:
            # (http.client raises AttributeError when its socket is shut under a read.)
            if self.closed:
                return
            raise KubeUnreachable(
                f"the {self._what} stream from the API server at {self._server} broke off "
                f"({type(e).__name__}: {e})") from e
        finally:
            with self._lock:
                self._reading = False
                self.closed = True
            self._release()

    def close(self) -> None:
        """End the stream. While another thread reads, only shut the socket down — that wakes
        the reader, which then releases the connection itself (http.client is not
        thread-safe, so two threads must not close it at once)."""
        with self._lock:
            if self.closed and not self._reading:
                return
            self.closed = True
            reading = self._reading
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):
                sock.shutdown(socket.SHUT_RDWR)
        if not reading:
            self._release()

    def _release(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError,
                                 http.client.HTTPException):
            self._conn.close()


class LogStream:
    """The lines of one container's log (without their newlines); iterate, then ``close()``
    (or use ``with``). ``close()`` from another thread ends a followed stream."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[str]:
        for raw in self._stream.lines():
            yield raw.decode("utf-8", "replace").rstrip("\r\n")

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Watch:
    """Events of a kind (one object by name, or those matching a label selector), across
    reconnections: each stream lasts ``WATCH_WINDOW`` seconds at most, then the watch resumes
    from the last resourceVersion it saw; when that is too old (410 Gone) it lists again and
    yields every current object as ADDED (deletions inside the gap are not seen). Ends after
    ``timeout`` seconds, when ``close()`` is called (from any thread), or raises
    `KubeUnreachable` after ``WATCH_RETRIES`` failed reconnections."""

    def __init__(self, client: KubeClient, resource: Resource, *, name: str | None,
                 label_selector: str | None, resource_version: str | None,
                 timeout: float | None, window: int = WATCH_WINDOW) -> None:
        self._client, self._resource = client, resource
        self._name, self._selector = name, label_selector
        self.resource_version = resource_version
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._window = window
        self._stream: _Stream | None = None
        self._closed = False

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            self._stream.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query(self, seconds: int) -> dict[str, str]:
        q = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(seconds)}
        if self._name:
            q["fieldSelector"] = f"metadata.name={self._name}"
        if self._selector:
            q["labelSelector"] = self._selector
        if self.resource_version:
            q["resourceVersion"] = self.resource_version
        return q

    def __iter__(self) -> Iterator[WatchEvent]:
        failures = 0
        while not self._closed:
            left = None if self._deadline is None else self._deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            seconds = max(1, math.ceil(min(self._window, self._window if left is None else left)))
            try:
                self._stream = self._client._open(
                    "GET", self._resource.path(self._client.namespace), self._query(seconds),
                    read_timeout=seconds + 15, what=f"watch of {self._resource.plural}",
                    ctx=("watch", self._resource, self._name))
                if self._closed:  # close() came while connecting: it saw the old stream
                    return
                for raw in self._stream.lines():
                    event = self._client._decode(raw, "a watch event")
                    if event.get("type") == "ERROR":
                        raise self._client._status_error(event.get("object") or {}, "watch",
                                                         self._resource, self._name)
                    obj = event.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion")
                    if rv:
                        self.resource_version = str(rv)
                    failures = 0
                    if event.get("type") != "BOOKMARK":
                        yield WatchEvent(str(event.get("type")), obj)
            except KubeGone:
                yield from self._relist()
            except KubeUnreachable:
                if self._closed:
                    return
                failures += 1
                if failures > WATCH_RETRIES:
                    raise
                time.sleep(min(0.25 * 2 ** failures, 4.0))
            finally:
                if self._stream is not None:
                    self._stream.close()

    def _relist(self) -> Iterator[WatchEvent]:
        fields = f"metadata.name={self._name}" if self._name else None
        items, rv = self._client._list(self._resource, self._selector, fields)
        self.resource_version = rv or None
        for item in items:
            yield WatchEvent("ADDED", item)


# -- the client ----------------------------------------------------------------------------------
class KubeClient:
    """A namespace of one Kubernetes cluster, over HTTP(S) with a bearer token or client cert.

    Thread-safe: each request opens its own connection.
    """

    def __init__(self, server: str, *, token: str | None = None, namespace: str,
                 ca_file: str | None = None, insecure: bool = False, timeout: float = 30,
                 ca_data: str | None = None, client_cert: tuple[str, str] | None = None,
                 token_source: TokenSource | None = None) -> None:
        parts = urllib.parse.urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KubeConfigError(
                f"server={server!r}: not an http(s) URL; expected e.g. https://10.0.0.1:6443")
        self.server = server.rstrip("/")
        self.namespace = namespace
        self.timeout = timeout
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._tokens = token_source or (static_token(token) if token else None)
        # Only a token that can change (a rotated file, an exec plugin) is worth asking again
        # after a 401.
        self._refreshable = token_source is not None
        self._ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._ssl = self._tls(ca_file, ca_data, insecure, client_cert)

    def __repr__(self) -> str:
        return f"KubeClient({self.server!r}, namespace={self.namespace!r})"

    @staticmethod
    def _tls(ca_file: str | None, ca_data: str | None, insecure: bool,
             client_cert: tuple[str, str] | None) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
            if insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if client_cert:
                ctx.load_cert_chain(*client_cert)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise KubeConfigError(
                f"cannot load the TLS files of the kubeconfig (CA {ca_file or 'inline data'}, "
                f"client certificate {client_cert[0] if client_cert else 'none'}): {e}") from e
        return ctx

    # -- the API -----------------------------------------------------------------------------
    def create(self, obj: Obj) -> Obj:
        """Create ``obj`` (its apiVersion/kind pick the path); the object as stored."""
        res = resource_for(str(obj.get("kind", "")), obj.get("apiVersion"))
        ns = obj.get("metadata", {}).get("namespace") or self.namespace
        name = obj.get("metadata", {}).get("name")
        return self._json("POST", res.path(ns), body=obj,
                          ctx=("create", res, name))

    def get(self, kind: str, name: str, *, api_version: str | None = None) -> Obj:
        res = resource_for(kind, api_version)
        return self._json("GET", res.path(self.namespace, name), ctx=("get", res, name))

    def patch(self, kind: str, name: str, patch: Obj, *,
              api_version: str | None = None) -> Obj:
        """Apply a JSON merge patch (RFC 7386), e.g. ``{"spec": {"suspend": True}}``."""
        res = resource_for(kind, api_version)
        return self._json("PATCH", res.path(self.namespace, name), body=patch,
                          content_type="application/merge-patch+json", ctx=("patch", res, name))

    def delete(self, kind: str, name: str, propagation: str = "Foreground", *,
               missing_ok: bool = False, grace_seconds: int | None = None,
               api_version: str | None = None) -> Obj | None:
        """Delete ``name``; with ``Foreground`` its dependents (a JobSet's Jobs and pods, its
        Workload) go first and the object stays, marked, until they are gone. The server's
        answer (the marked object or a Status); None when missing and ``missing_ok``."""
        if propagation not in ("Foreground", "Background", "Orphan"):
            raise ValueError(f"propagation={propagation!r}: use Foreground, Background or Orphan")
        res = resource_for(kind, api_version)
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1",
                     "propagationPolicy": propagation}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            return self._json("DELETE", res.path(self.namespace, name), body=body,
                              ctx=("delete", res, name))
        except KubeNotFound:
            if missing_ok:
                return None
            raise

    def list(self, kind: str, label_selector: str | None = None, *,
             field_selector: str | None = None,
             api_version: str | None = None) -> builtins.list[Obj]:
        """The objects of ``kind`` in this namespace, filtered by selectors (``"a=b,c!=d"``)."""
        return self._list(resource_for(kind, api_version), label_selector, field_selector)[0]

    def watch(self, kind: str, name: str | None = None, *, label_selector: str | None = None,
              resource_version: str | None = None, timeout: float | None = None,
              api_version: str | None = None, window: int = WATCH_WINDOW) -> Watch:
        """Events of one object (``name``) or of those matching ``label_selector``. Without
        ``resource_version`` the current objects come first, as ADDED events."""
        return Watch(self, resource_for(kind, api_version), name=name,
                     label_selector=label_selector, resource_version=resource_version,
                     timeout=timeout, window=window)

    def pod_logs(self, pod: str, container: str | None = None, follow: bool = False,
                 tail_lines: int | None = None) -> LogStream:
        """The log lines of a container; with ``follow`` the stream stays open until the
        container ends (no read timeout: ``close()`` it to stop early)."""
        q: dict[str, str] = {}
        if container:
            q["container"] = container
        if follow:
            q["follow"] = "true"
        if tail_lines is not None:
            q["tailLines"] = str(tail_lines)
        res = resource_for("Pod")
        return LogStream(self._open(
            "GET", res.path(self.namespace, pod, "log"), q, accept="text/plain",
            read_timeout=None if follow else self.timeout, what=f"log of pod {pod}",
            ctx=("read the log of", res, pod)))

    def version(self) -> Obj:
        """The server's /version (a cheap reachability and credentials check)."""
        return self._json("GET", "/version", ctx=("get the version of", None, None))

    # -- classmethods: where the configuration comes from (see `kubeconfig`) ------------------
    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str] | None = None,
                        context: str | None = None, *, namespace: str | None = None,
                        timeout: float = 30) -> KubeClient:
        """A client for ``context`` (default: the current one) of the kubeconfig at ``path``
        (default: ``$KUBECONFIG``, then ``~/.kube/config``); inside a pod with neither, the
        pod's service account. ``namespace`` overrides the context's."""
        return kubeconfig.from_kubeconfig(cls, path, context, namespace=namespace,
                                          timeout=timeout)

    @classmethod
    def in_cluster(cls, *, namespace: str | None = None, timeout: float = 30,
                   account_dir: str = SERVICE_ACCOUNT_DIR) -> KubeClient:
        """A client with the service account of the pod this process runs in."""
        return kubeconfig.in_cluster(cls, namespace=namespace, timeout=timeout,
                                     account_dir=account_dir)

    def _list(self, res: Resource, label_selector: str | None,
              field_selector: str | None) -> tuple[builtins.list[Obj], str]:
        q = {}
        if label_selector:
            q["labelSelector"] = label_selector
        if field_selector:
            q["fieldSelector"] = field_selector
        answer = self._json("GET", res.path(self.namespace), query=q, ctx=("list", res, None))
        items = answer.get("items") or []
        return list(items), str(answer.get("metadata", {}).get("resourceVersion") or "")

    def _json(self, method: str, path: str, *, query: dict[str, str] | None = None,
              body: Obj | None = None, content_type: str = "application/json",
              ctx: tuple[str, Resource | None, str | None]) -> Obj:
        stream = self._open(method, path, query or {}, body=body, content_type=content_type,
                            read_timeout=self.timeout, what=ctx[0], ctx=ctx)
        try:
            data = stream._resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise self._unreachable(e) from e
        finally:
            stream.close()
        return self._decode(data, f"the answer to {method} {path}")

    def _decode(self, data: bytes, what: str) -> Obj:
        try:
            value = json.loads(data)
        except ValueError as e:
            raise KubeApiError(200, "BadResponse", f"{what} is not JSON: {data[:200]!r}",
                               f"the server at {self.server} sent {what} that is not JSON "
                               f"({data[:200]!r}): is this URL a Kubernetes API server?") from e
        if not isinstance(value, dict):
            raise KubeApiError(200, "BadResponse", f"{what} is not a JSON object")
        return value

    def _open(self, method: str, path: str, query: dict[str, str], *,
              body: Obj | None = None, content_type: str = "application/json",
              accept: str = "application/json", read_timeout: float | None,
              what: str, ctx: tuple[str, Resource | None, str | None] | None = None,
              _retried: bool = False) -> _Stream:
        url = self._prefix + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": accept, "User-Agent": "shoal"}
        data, payload = None, b""
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        token = self._tokens(_retried) if self._tokens else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn: http.client.HTTPConnection
        if self._ssl is not None:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout,
                                               context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        try:
            conn.request(method, url, body=data, headers=headers)
            resp = conn.getresponse()
            if conn.sock is not None:
                conn.sock.settimeout(read_timeout)
            if resp.status >= 400:
                payload = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._unreachable(e) from e
        if resp.status < 400:
            return _Stream(conn, resp, self.server, what)
        conn.close()
        if resp.status == 401 and self._refreshable and not _retried:
            # An exec plugin's or a rotated file's token may just have expired: fetch anew once.
            return self._open(method, path, query, body=body, content_type=content_type,
                              accept=accept, read_timeout=read_timeout, what=what, ctx=ctx,
                              _retried=True)
        try:
            status = json.loads(payload)
        except ValueError:
            status = {}
        if not isinstance(status, dict) or status.get("kind") != "Status":
            status = {"code": resp.status, "reason": resp.reason,
                      "message": payload[:300].decode("utf-8", "replace").strip()
                      or resp.reason}
        status.setdefault("code", resp.status)
        verb, res, name = ctx or (what, None, None)
        raise self._status_error(status, verb, res, name)

    def _unreachable(self, e: BaseException) -> KubeUnreachable:
        return unreachable(e, self.server, self.timeout)

    def _status_error(self, status: Obj, verb: str, res: Resource | None,
                      name: str | None) -> KubeApiError:
        return status_error(status, verb, res, name, server=self.server,
                            namespace=self.namespace)


__all__ = [
    "RESOURCES", "SERVICE_ACCOUNT_DIR", "WATCH_RETRIES", "WATCH_WINDOW", "KubeApiError",
    "KubeClient", "KubeConfigError", "KubeConflict", "KubeError", "KubeForbidden", "KubeGone",
    "KubeInvalid", "KubeNotFound", "KubeUnauthorized", "KubeUnreachable", "LogStream", "Obj",
    "Resource", "TokenSource", "Watch", "WatchEvent", "resource_for",
]
