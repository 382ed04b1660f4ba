"""An environment's secrets in a pod: ``secretKeyRef`` variables and one secret volume.

Every secret is the key ``key`` of the one Kubernetes Secret ``KubeConfig.secret_name`` (create
it with one key per secret key). A secret with a variable (``env_var``) becomes that variable;
a secret with ``mount=`` becomes the file ``<mount>/<group>/<key lower-cased>`` of a read-only
secret volume (mode 0400), the layout Flyte 2 uses, and ``SHOAL_SECRETS_DIR`` names ``mount``,
as on the local engine.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from shoal import _contract as contract
from shoal._engines.kubernetes.config import KubeConfig
from shoal._spec.call import EnvSpec
from shoal.errors import SpecError

SECRETS_VOLUME = "shoal-secrets"


_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # what a key of a Kubernetes Secret may be


def _secret_name(env: EnvSpec, config: KubeConfig) -> str:
    for s in env.secrets:
        if not _KEY.match(s.key):
            raise SpecError(f"TaskEnvironment({env.name!r}).secrets", s.key,
                            "is not a valid key of a Kubernetes Secret ([-._a-zA-Z0-9]+)",
                            "rename the key in the Secret and in shoal.Secret(...)")
    if config.secret_name is None:
        raise SpecError(f"TaskEnvironment({env.name!r}).secrets", [s.key for s in env.secrets],
                        "on Kubernetes secrets come from a Secret, and KubeConfig.secret_name "
                        "names none", "create a Secret with one key per secret key and set "
                        "KubeConfig(secret_name=...)")
    return config.secret_name


def mount_path(env: EnvSpec) -> str | None:
    """The one folder the environment's mounted secrets are in (None: no mounted secret)."""
    paths = sorted({s.mount for s in env.secrets if s.mount is not None})
    if len(paths) > 1:
        raise SpecError(f"TaskEnvironment({env.name!r}).secrets", paths,
                        "mounted secrets of one environment must share one mount path",
                        f"use mount={paths[0]!r} for all of them")
    return paths[0] if paths else None


def secret_env_entries(env: EnvSpec, config: KubeConfig,
                       taken: Collection[str]) -> list[dict[str, Any]]:
    """The ``env`` entries for the secrets (a variable in ``taken`` is set by something else)."""
    wanted = [s for s in env.secrets if s.env_var is not None and s.env_var not in taken]
    mount = mount_path(env)
    if not wanted and mount is None:
        return []
    name = _secret_name(env, config)
    out: list[dict[str, Any]] = [
        {"name": s.env_var, "valueFrom": {"secretKeyRef": {"name": name, "key": s.key}}}
        for s in wanted]
    if mount is not None:
        out.append({"name": contract.SECRETS_DIR, "value": mount})
    return out


def secret_volume(env: EnvSpec, config: KubeConfig) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the pod's volume, the container's volumeMount) for the mounted secrets, if any."""
    mount = mount_path(env)
    if mount is None:
        return None
    items = [{"key": s.key, "path": f"{s.group}/{s.key.lower()}" if s.group else s.key.lower()}
             for s in env.secrets if s.mount is not None]
    volume = {"name": SECRETS_VOLUME, "secret": {"secretName": _secret_name(env, config),
                                                 "items": items, "defaultMode": 0o400}}
    return volume, {"name": SECRETS_VOLUME, "mountPath": mount, "readOnly": True}
