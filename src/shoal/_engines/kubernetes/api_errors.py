"""What can go wrong talking to Kubernetes, and the one translation of it into Shoal's errors.

The tree (all of it under `shoal.errors.EngineError`):

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

`unreachable` turns a failed connection (sockets, TLS, ``http.client``) into `KubeUnreachable`;
`status_error` turns an error ``Status`` from the server into the `KubeApiError` of its code.
The client (`client.py`) and the loading of its configuration (`kubeconfig.py`) are the only
modules that catch a third-party exception; the rest of the engine sees only this tree. Each
message says what was asked of which server and what to do about it.
"""

from __future__ import annotations

import socket
import ssl
from typing import TYPE_CHECKING

from shoal.errors import EngineError

if TYPE_CHECKING:
    from shoal._engines.kubernetes.resources import Obj, Resource


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
# Who installs the custom resources, for the "is it installed?" hint.
_INSTALLED_BY = {"jobset.x-k8s.io": "JobSet", "kueue.x-k8s.io": "Kueue"}


def unreachable(e: BaseException, server: str, timeout: float) -> KubeUnreachable:
    """What a failed connection to ``server`` (an ``OSError``, ``ssl`` or ``http.client``
    error) becomes."""
    where = f"the Kubernetes API server at {server}"
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
        return KubeUnreachable(f"no answer from {where} within {timeout:g} s: check "
                               f"your network/VPN, or raise the timeout")
    return KubeUnreachable(f"cannot talk to {where} ({type(e).__name__}: {e}): check that "
                           f"the cluster is up (kubectl cluster-info)")


def status_error(status: Obj, verb: str, res: Resource | None, name: str | None, *,
                 server: str, namespace: str) -> KubeApiError:
    """What an error ``Status`` from ``server`` becomes, when asked to ``verb`` ``name`` (a
    ``res``) in ``namespace``: the `KubeApiError` of its code, with a message saying what to
    do."""
    code = int(status.get("code") or 500)
    reason = str(status.get("reason") or "Unknown")
    message = str(status.get("message") or reason)
    what = res.kind if res else "object"
    target = f"{what} {name!r}" if name else (res.plural if res else "the server")
    ns = f" in namespace {namespace!r}" if res is None or res.namespaced else ""
    asked = f"{verb} {target}{ns} at {server}"
    kind = _BY_STATUS.get(code, KubeApiError)
    if code == 401:
        hint = (f"the API server at {server} refused the credentials (401 "
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


__all__ = [
    "KubeApiError", "KubeConfigError", "KubeConflict", "KubeError", "KubeForbidden", "KubeGone",
    "KubeInvalid", "KubeNotFound", "KubeUnauthorized", "KubeUnreachable", "status_error",
    "unreachable",
]
