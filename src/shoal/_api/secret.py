"""`Secret`: a named secret a task needs (Flyte 2's ``flyte.Secret``), and ``secrets=`` parsing.

Where a secret's value comes from is the engine's business. Locally
(``shoal._engines.host_secrets``): the engine's own environment variable ``as_env_var``, then
the key upper-cased, then the file ``$SHOAL_HOME/secrets/<group>/<key>`` (``secrets/<key>``
without a group). On Kubernetes (``shoal._engines.kubernetes.secrets``): the key ``key`` of the
Secret ``KubeConfig.secret_name``. A plain string in ``secrets=`` is a key whose variable is that
string upper-cased, ``-`` as ``_`` (``"WANDB_API_KEY"`` stays ``WANDB_API_KEY``), as in Flyte.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from shoal._spec.call import SecretSpec
from shoal.errors import SpecError

_ENV_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A key and a group become one path segment each locally and names on Kubernetes.
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


def default_env_var(key: str, group: str | None) -> str:
    name = f"{group}_{key}" if group else key
    return re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


@dataclass(frozen=True)
class Secret:
    """A secret given to a task as the variable ``as_env_var`` (default, without ``mount``:
    the key upper-cased, ``-`` as ``_``, prefixed with the group when there is one), and/or,
    with ``mount=``, as a private file ``<folder>/<group>/<key lower-cased>`` (Flyte's layout).
    On Kubernetes the folder is ``mount``; locally it is a per-run folder (Flyte's
    ``/etc/flyte/secrets`` would need root), and on both ``$SHOAL_SECRETS_DIR`` names it."""

    key: str
    group: str | None = None
    mount: str | PurePosixPath | None = None
    as_env_var: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _SEGMENT.match(self.key):
            raise SpecError("Secret.key", self.key, "must be a name of letters, digits and "
                            "_ . : - (not starting with a symbol)", 'e.g. Secret("openai-key")')
        if self.group is not None and (not isinstance(self.group, str)
                                       or not _SEGMENT.match(self.group)):
            raise SpecError("Secret.group", self.group, "must be a name of letters, digits "
                            "and _ . : - (no slash)", 'e.g. Secret("key", group="team-a")')
        if self.as_env_var is not None and (not isinstance(self.as_env_var, str)
                                            or not _ENV_VAR.match(self.as_env_var)):
            raise SpecError("Secret.as_env_var", self.as_env_var,
                            "must be an environment variable name [A-Za-z_][A-Za-z0-9_]*",
                            'e.g. as_env_var="OPENAI_API_KEY"')
        if self.mount is not None and not str(self.mount).startswith("/"):
            raise SpecError("Secret.mount", self.mount, "must be an absolute path",
                            'e.g. mount="/etc/flyte/secrets"')

    def spec(self) -> SecretSpec:
        env_var = self.as_env_var
        if env_var is None and self.mount is None:
            env_var = default_env_var(self.key, self.group)
        return SecretSpec(key=self.key, group=self.group, env_var=env_var,
                          mount=None if self.mount is None else str(self.mount))


def secret_specs(field: str, value: object) -> tuple[SecretSpec, ...]:
    """``secrets=``: a key, a `Secret`, or a list of them."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str | Secret) else value
    if not isinstance(items, Iterable):
        raise SpecError(field, value, "must be a secret key, a shoal.Secret or a list of them",
                        'e.g. secrets=["WANDB_API_KEY", shoal.Secret("hf-token", '
                        'as_env_var="HF_TOKEN")]')
    out: list[SecretSpec] = []
    for item in items:
        if isinstance(item, Secret):
            out.append(item.spec())
        elif isinstance(item, str) and _SEGMENT.match(item):
            out.append(SecretSpec(key=item, env_var=default_env_var(item, None)))
        else:
            raise SpecError(field, item, "must be a secret key or a shoal.Secret",
                            'e.g. secrets=["WANDB_API_KEY"]')
    return tuple(out)
