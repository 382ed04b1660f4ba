"""Where a `KubeClient`'s server and credentials come from: kubeconfig files, the service
account of the pod it runs in, and the bearer tokens they name (static, a rotated file, or a
kubeconfig's exec credential plugin).

`KubeClient.from_kubeconfig` and `KubeClient.in_cluster` are the way in; they hand their class
to `from_kubeconfig` / `in_cluster` here. What can fail while reading all that (files, YAML,
base64, the plugin's process and output) becomes a `KubeConfigError` right where it is read.
With `client.py` (sockets, TLS, HTTP, JSON), this is the only module of the engine that catches
a third-party exception; both raise only the errors drawn in `api_errors`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shoal._engines.kubernetes.api_errors import KubeConfigError
from shoal._engines.kubernetes.resources import Obj

if TYPE_CHECKING:
    from shoal._engines.kubernetes.client import KubeClient

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


# -- credentials ---------------------------------------------------------------------------------
TokenSource = Callable[[bool], "str | None"]  # (refresh) -> current bearer token


def static_token(token: str) -> TokenSource:
    """A bearer token given as it is (``KubeClient(token=...)``): refreshing cannot renew it."""
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


# -- where the configuration comes from ----------------------------------------------------------
def from_kubeconfig(cls: type[KubeClient], path: str | os.PathLike[str] | None = None,
                    context: str | None = None, *, namespace: str | None = None,
                    timeout: float = 30) -> KubeClient:
    """See `KubeClient.from_kubeconfig`; ``cls`` is the class to build."""
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


def in_cluster(cls: type[KubeClient], *, namespace: str | None = None, timeout: float = 30,
               account_dir: str = SERVICE_ACCOUNT_DIR) -> KubeClient:
    """See `KubeClient.in_cluster`; ``cls`` is the class to build."""
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


__all__ = ["SERVICE_ACCOUNT_DIR", "TokenSource", "from_kubeconfig", "in_cluster"]
