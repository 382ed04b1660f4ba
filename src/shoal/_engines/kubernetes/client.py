"""The Kubernetes API over plain HTTP: the only module of this engine that talks to a cluster.

No dependency on the ``kubernetes`` package: the few REST calls Shoal needs (create, get, patch,
list, delete, watch, pod logs) are ``http.client`` requests carrying JSON. Every third-party
failure — sockets, TLS, HTTP, JSON, YAML, the kubeconfig's exec plugin — is translated here, and
only here, into this tree (all of it under `shoal.errors.EngineError`):

    KubeError                   anything that went wrong talking to Kubernetes
    ├── KubeConfigError         no usable kubeconfig / in-cluster account, or it is malformed
    ├── KubeUnreachable         no answer: refused, DNS, TLS, timeout, dropped connection
    └── KubeApiError            the API server answered with an error Status
        ├── KubeUnauthorized    401: the credentials were refused
        ├── KubeForbidden       403: RBAC does not allow it
        ├── KubeNotFound        404: no such object, or the resource (CRD) is not installed
        ├── KubeConflict        409: already exists, or changed since it was read
        ├── KubeGone            410: a watch's resourceVersion is too old (watch handles it)
        └── KubeInvalid         422: the object failed validation

Each message says what was asked of which server and what to do about it.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import http.client
import json
import math
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from shoal.errors import EngineError

Obj = dict[str, Any]

# A watch asks the server to end each stream after this many seconds, then reconnects from the
# last resourceVersion it saw (the API server itself caps streams at ~30-60 min).
WATCH_WINDOW = 240
# Reconnection attempts of a watch whose server stopped answering, before giving up.
WATCH_RETRIES = 4
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class KubeError(EngineError):
    """Talking to the Kubernetes API failed."""


class KubeConfigError(KubeError):
    """No usable kubeconfig or in-cluster service account; the message says which and why."""


class KubeUnreachable(KubeError):
    """The API server did not answer (refused, unresolvable, TLS failure, timeout, dropped)."""


class KubeApiError(KubeError):
    """The API server answered with an error ``Status``.

    ``status`` is the HTTP code, ``reason`` the Status reason (``NotFound``, ``AlreadyExists``…),
    ``message`` the server's own message; ``str(err)`` adds what was asked and what to do.
    """

    def __init__(self, status: int, reason: str, message: str, text: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.text = text or f"{message} ({status} {reason})"
        super().__init__(self.text)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.status, self.reason, self.message, self.text))


class KubeUnauthorized(KubeApiError):
    """401: the token or client certificate was refused."""


class KubeForbidden(KubeApiError):
    """403: authenticated, but RBAC does not allow the request."""


class KubeNotFound(KubeApiError):
    """404: no such object, or the API server does not serve that resource at all."""


class KubeConflict(KubeApiError):
    """409: the object already exists, or changed since it was read."""


class KubeGone(KubeApiError):
    """410: the resourceVersion a watch started from is too old."""


class KubeInvalid(KubeApiError):
    """422: the object failed the API server's validation."""


_BY_STATUS: dict[int, type[KubeApiError]] = {
    401: KubeUnauthorized, 403: KubeForbidden, 404: KubeNotFound, 409: KubeConflict,
    410: KubeGone, 422: KubeInvalid,
}


# -- resources -----------------------------------------------------------------------------------
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
    Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
    Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue"),
    Resource("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False),
    Resource("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False),
)
# Who installs the custom resources, for the "is it installed?" hint.
_INSTALLED_BY = {"jobset.x-k8s.io": "JobSet", "kueue.x-k8s.io": "Kueue"}


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


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ``type`` is ADDED, MODIFIED or DELETED; ``object`` the object."""

    type: str
    object: Obj

    @property
    def name(self) -> str:
        return str(self.object.get("metadata", {}).get("name", ""))


# -- credentials ---------------------------------------------------------------------------------
TokenSource = Callable[[bool], "str | None"]  # (refresh) -> current bearer token


def _static(token: str) -> TokenSource:
    return lambda refresh: token


def _from_file(path: str) -> TokenSource:
    """Re-read a token file once a minute: projected service-account tokens rotate."""
    cache: list[Any] = [None, 0.0]

    def source(refresh: bool) -> str | None:
        if refresh or time.monotonic() - cache[1] > 60:
            try:
                cache[0] = Path(path).read_text().strip()
            except OSError as e:
                raise KubeConfigError(f"cannot read the token file {path}: {e}") from e
            cache[1] = time.monotonic()
        return str(cache[0])

    return source


def _from_exec(spec: Obj, base_dir: Path) -> TokenSource:
    """Run the kubeconfig's exec credential plugin (gke-gcloud-auth-plugin, aws eks get-token,
    kubelogin…) and cache its token until shortly before it expires."""
    command = str(spec.get("command", ""))
    if "/" in command and not os.path.isabs(command):
        command = str(base_dir / command)
    argv = [command, *(str(a) for a in spec.get("args") or [])]
    env = dict(os.environ)
    env.update({str(e["name"]): str(e["value"]) for e in spec.get("env") or []})
    env["KUBERNETES_EXEC_INFO"] = json.dumps({
        "apiVersion": spec.get("apiVersion", "client.authentication.k8s.io/v1beta1"),
        "kind": "ExecCredential", "spec": {"interactive": False}})
    cache: list[Any] = [None, 0.0]  # token, expiry (epoch seconds)

    def source(refresh: bool) -> str | None:
        if not refresh and cache[0] and time.time() < cache[1]:
            return str(cache[0])
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                                  check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError as e:
            raise KubeConfigError(
                f"the kubeconfig's credential plugin {command!r} is not installed: install it "
                f"(it is named in users[].user.exec.command) or use a context with a token"
            ) from e
        except (OSError, subprocess.SubprocessError) as e:
            raise KubeConfigError(f"the credential plugin {command!r} failed: {e}") from e
        if done.returncode != 0:
            raise KubeConfigError(
                f"the credential plugin {command!r} exited with {done.returncode}: "
                f"{done.stderr.strip()[-500:]}. Log in again with your cloud's CLI")
        try:
            status = json.loads(done.stdout)["status"]
            token = str(status["token"])
        except (ValueError, KeyError, TypeError) as e:
            raise KubeConfigError(
                f"the credential plugin {command!r} did not print an ExecCredential with "
                f"status.token (client certificates from plugins are not supported)") from e
        expiry = time.time() + 300
        if status.get("expirationTimestamp"):
            with contextlib.suppress(ValueError):
                stamp = str(status["expirationTimestamp"]).replace("Z", "+00:00")
                expiry = datetime.fromisoformat(stamp).timestamp() - 60
        cache[0], cache[1] = token, expiry
        return token

    return source


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
        self._tokens = token_source or (_static(token) if token else None)
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

    # -- classmethods: where the configuration comes from --------------------------------------
    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str] | None = None,
                        context: str | None = None, *, namespace: str | None = None,
                        timeout: float = 30) -> KubeClient:
        """A client for ``context`` (default: the current one) of the kubeconfig at ``path``
        (default: ``$KUBECONFIG``, then ``~/.kube/config``); inside a pod with neither, the
        pod's service account. ``namespace`` overrides the context's."""
        if path is not None:
            files = [Path(path)]
        elif os.environ.get("KUBECONFIG"):
            files = [Path(p) for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
        else:
            files = [Path.home() / ".kube" / "config"]
        existing = [f for f in files if f.is_file()]
        if not existing:
            if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                return cls.in_cluster(namespace=namespace, timeout=timeout)
            raise KubeConfigError(
                f"no kubeconfig at {', '.join(map(str, files))} and not running in a pod: "
                f"point KUBECONFIG at your cluster's kubeconfig (kubectl config view --raw)")
        return _from_kubeconfig_files(cls, existing, context, namespace, timeout)

    @classmethod
    def in_cluster(cls, *, namespace: str | None = None, timeout: float = 30,
                   account_dir: str = SERVICE_ACCOUNT_DIR) -> KubeClient:
        """A client with the service account of the pod this process runs in."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), \
            os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        folder = Path(account_dir)
        if not host or not (folder / "token").is_file():
            raise KubeConfigError(
                f"not running in a pod with a service account (KUBERNETES_SERVICE_HOST is "
                f"{'set' if host else 'unset'}, {folder / 'token'} "
                f"{'exists' if (folder / 'token').is_file() else 'is missing'}): "
                f"use a kubeconfig, or set automountServiceAccountToken: true on the pod")
        if ":" in host:
            host = f"[{host}]"
        if namespace is None:
            try:
                namespace = (folder / "namespace").read_text().strip() or "default"
            except OSError:
                namespace = "default"
        ca = folder / "ca.crt"
        return cls(f"https://{host}:{port}", namespace=namespace, timeout=timeout,
                   ca_file=str(ca) if ca.is_file() else None,
                   token_source=_from_file(str(folder / "token")))

    # -- HTTP ------------------------------------------------------------------------------
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
        where = f"the Kubernetes API server at {self.server}"
        if isinstance(e, ssl.SSLCertVerificationError):
            return KubeUnreachable(
                f"the TLS certificate of {where} could not be verified ({e.verify_message}): "
                f"give the cluster's CA (certificate-authority-data in the kubeconfig, or "
                f"ca_file); skip verification (insecure-skip-tls-verify) only on a test cluster")
        if isinstance(e, ssl.SSLError):
            return KubeUnreachable(f"the TLS handshake with {where} failed ({e}): check that "
                                   f"the URL's scheme and port are the API server's")
        if isinstance(e, ConnectionRefusedError):
            return KubeUnreachable(
                f"{where} refused the connection: check that the cluster is up and that your "
                f"kubeconfig context points at it (kubectl cluster-info)")
        if isinstance(e, socket.gaierror):
            return KubeUnreachable(f"cannot resolve the host of {where} ({e}): check the "
                                   f"server URL of your kubeconfig context and your network/VPN")
        if isinstance(e, TimeoutError):
            return KubeUnreachable(f"no answer from {where} within {self.timeout:g} s: check "
                                   f"your network/VPN, or raise the timeout")
        return KubeUnreachable(f"cannot talk to {where} ({type(e).__name__}: {e}): check that "
                               f"the cluster is up (kubectl cluster-info)")

    def _status_error(self, status: Obj, verb: str, res: Resource | None,
                      name: str | None) -> KubeApiError:
        code = int(status.get("code") or 500)
        reason = str(status.get("reason") or "Unknown")
        message = str(status.get("message") or reason)
        what = res.kind if res else "object"
        target = f"{what} {name!r}" if name else (res.plural if res else "the server")
        ns = f" in namespace {self.namespace!r}" if res is None or res.namespaced else ""
        asked = f"{verb} {target}{ns} at {self.server}"
        kind = _BY_STATUS.get(code, KubeApiError)
        if code == 401:
            hint = (f"the API server at {self.server} refused the credentials (401 "
                    f"Unauthorized): the token or client certificate is wrong or expired. "
                    f"Check your kubeconfig context (kubectl config current-context; kubectl "
                    f"auth whoami) or log in again")
        elif code == 403:
            group = res.group if res and res.group else "\"\""
            hint = (f"cannot {asked}: forbidden ({message}). Ask an admin for an RBAC Role "
                    f"that allows it (apiGroups [{group}], resources "
                    f"[{res.plural if res else '...'}]) in this namespace, or use another one")
        elif code == 404 and res is not None and not (status.get("details") or {}).get("name"):
            owner = _INSTALLED_BY.get(res.group)
            hint = (f"cannot {asked}: the API server does not serve "
                    f"{res.full_name}/{res.version} ({message})"
                    + (f"; is {owner} installed? (kubectl get crd {res.full_name})"
                       if owner else ""))
        elif code == 404:
            hint = f"cannot {asked}: not found ({message})"
        elif code == 409 and reason == "AlreadyExists":
            hint = (f"cannot {asked}: it already exists. Delete it first (or let shoal cancel "
                    f"it), or use another name")
        elif code == 409:
            hint = f"cannot {asked}: it changed meanwhile ({message}); read it again and retry"
        elif code == 410:
            hint = f"cannot {asked}: {message} (the watch's resourceVersion expired)"
        elif code == 422:
            causes = (status.get("details") or {}).get("causes") or []
            extra = "; ".join(f"{c.get('field')}: {c.get('message')}" for c in causes)
            hint = (f"the API server rejected {target} as invalid: {message}"
                    + (f" [{extra}]" if extra and extra not in message else ""))
        elif code == 429 or code >= 500:
            hint = (f"cannot {asked}: the API server is overloaded or failing ({code} "
                    f"{reason}: {message}); try again shortly")
        else:
            hint = f"cannot {asked}: {message} ({code} {reason})"
        return kind(code, reason, message, hint)


def _from_kubeconfig_files(cls: type[KubeClient], files: list[Path], context: str | None,
                           namespace: str | None, timeout: float) -> KubeClient:
    try:
        import yaml
    except ImportError as e:
        raise KubeConfigError("reading a kubeconfig needs PyYAML: pip install pyyaml") from e
    merged: dict[str, dict[str, Obj]] = {"clusters": {}, "users": {}, "contexts": {}}
    homes: dict[tuple[str, str], Path] = {}  # (section, name) -> the folder of its file
    current = None
    for f in files:
        try:
            doc = yaml.safe_load(f.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise KubeConfigError(f"cannot read the kubeconfig {f}: {e}") from e
        if not isinstance(doc, dict):
            raise KubeConfigError(f"the kubeconfig {f} is not a YAML mapping")
        current = current or doc.get("current-context")
        for section, inner in (("clusters", "cluster"), ("users", "user"),
                               ("contexts", "context")):
            for entry in doc.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") not in merged[section]:
                    merged[section][str(entry.get("name"))] = entry.get(inner) or {}
                    homes[(section, str(entry.get("name")))] = f.parent
    name = context or current
    shown = ", ".join(merged["contexts"]) or "none"
    if not name:
        raise KubeConfigError(f"the kubeconfig ({', '.join(map(str, files))}) sets no "
                              f"current-context: pick one of: {shown}")
    if name not in merged["contexts"]:
        raise KubeConfigError(f"context {name!r} is not in the kubeconfig "
                              f"({', '.join(map(str, files))}); contexts: {shown}")
    ctx = merged["contexts"][name]
    cluster = merged["clusters"].get(str(ctx.get("cluster")))
    if not cluster or not cluster.get("server"):
        raise KubeConfigError(f"context {name!r} names cluster {ctx.get('cluster')!r}, which "
                              f"the kubeconfig does not define (with a server)")
    user = merged["users"].get(str(ctx.get("user")), {})
    cbase = homes.get(("clusters", str(ctx.get("cluster"))), Path.cwd())
    ubase = homes.get(("users", str(ctx.get("user"))), Path.cwd())

    def path_of(value: Any, base: Path) -> str | None:
        return None if not value else str(base / os.path.expanduser(str(value)))

    def decoded(field: str, value: Any) -> bytes:
        try:
            return base64.b64decode(str(value), validate=True)
        except ValueError as e:
            raise KubeConfigError(f"{field} of context {name!r} is not base64: {e}") from e

    ca_data = None
    if cluster.get("certificate-authority-data"):
        ca_data = decoded("certificate-authority-data",
                          cluster["certificate-authority-data"]).decode("ascii", "replace")
    token: str | None = None
    token_source: TokenSource | None = None
    if user.get("token"):
        token = str(user["token"])
    elif user.get("tokenFile"):
        token_source = _from_file(str(path_of(user["tokenFile"], ubase)))
    elif user.get("exec"):
        token_source = _from_exec(user["exec"], ubase)
    elif user.get("auth-provider"):
        raise KubeConfigError(
            f"context {name!r} uses the removed auth-provider mechanism: regenerate the "
            f"kubeconfig with your cloud's CLI (it writes an exec plugin instead)")
    common: dict[str, Any] = dict(
        namespace=namespace or ctx.get("namespace") or "default", timeout=timeout,
        ca_file=path_of(cluster.get("certificate-authority"), cbase), ca_data=ca_data,
        insecure=bool(cluster.get("insecure-skip-tls-verify")), token=token,
        token_source=token_source)
    cert = path_of(user.get("client-certificate"), ubase)
    key = path_of(user.get("client-key"), ubase)
    if user.get("client-certificate-data") and user.get("client-key-data"):
        # ssl loads a client certificate only from files: write them where only we can read
        # them, for as long as loading takes.
        with tempfile.TemporaryDirectory(prefix="shoal-kube-") as tmp:
            cert, key = os.path.join(tmp, "client.crt"), os.path.join(tmp, "client.key")
            for target, field in ((cert, "client-certificate-data"),
                                  (key, "client-key-data")):
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(decoded(field, user[field]))
            return cls(str(cluster["server"]), client_cert=(cert, key), **common)
    return cls(str(cluster["server"]), client_cert=(cert, key) if cert and key else None,
               **common)


__all__ = [
    "RESOURCES", "KubeApiError", "KubeClient", "KubeConfigError", "KubeConflict", "KubeError",
    "KubeForbidden", "KubeGone", "KubeInvalid", "KubeNotFound", "KubeUnauthorized",
    "KubeUnreachable", "LogStream", "Resource", "Watch", "WatchEvent", "resource_for",
]
