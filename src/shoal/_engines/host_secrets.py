"""Where the engines that start tasks from the driver's machine (local, Slurm) find a task's
secrets, and how they hand them over.

A secret (`SecretSpec`) is looked up, in order, in the engine's own environment variable
``env_var`` (Flyte's ``as_env_var``; by default the key upper-cased, ``-`` as ``_``), then the
variable named by the key upper-cased, then the file ``$SHOAL_HOME/secrets/<group>/<key>``
(``secrets/<key>`` without a group), whose content is the value less one trailing newline.
The value is given to the task as ``env_var``; with ``mount=``, it is also written to a private
file ``<run secrets dir>/<group>/<key lower-cased>`` (folders 0700, file 0600, removed when the
engine closes), the folder is named by ``SHOAL_SECRETS_DIR``. A secret found nowhere fails the
call before it starts, naming the key and both ways to provide it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from shoal import _contract as contract
from shoal._spec.call import EnvSpec, SecretSpec


class SecretMissing(Exception):
    """A secret found neither in the environment nor in ``$SHOAL_HOME/secrets``."""


def secret_file(home: Path, s: SecretSpec) -> Path:
    return home / "secrets" / s.group / s.key if s.group else home / "secrets" / s.key


def _names(s: SecretSpec) -> list[str]:
    plain = re.sub(r"[^A-Za-z0-9_]", "_", s.key).upper()
    return [n for n in dict.fromkeys((s.env_var, plain)) if n]


def lookup(s: SecretSpec, base: Mapping[str, str], home: Path) -> str:
    for name in _names(s):
        if name in base:
            return base[name]
    path = secret_file(home, s)
    if path.is_file():
        text = path.read_text()
        return text[:-1] if text.endswith("\n") else text
    shown = " or ".join(f"${n}" for n in _names(s))
    raise SecretMissing(
        f"secret {s.key!r}{f' (group {s.group!r})' if s.group else ''} was not found: set "
        f"{shown} in the environment `shoal run` starts from, or write its value to {path}")


def secret_environ(env: EnvSpec, base: Mapping[str, str], home: Path,
                   mount_dir: Path) -> dict[str, str]:
    """The variables that give ``env``'s processes their secrets (files written for mounts)."""
    out: dict[str, str] = {}
    for s in env.secrets:
        if s.env_var is not None and s.env_var in env.env_vars:
            continue  # an environment's env_vars win over a secret of the same name
        value = lookup(s, base, home)
        if s.env_var is not None:
            out[s.env_var] = value
        if s.mount is not None:
            folder = mount_dir / s.group if s.group else mount_dir
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = folder / s.key.lower()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(value)
            out[contract.SECRETS_DIR] = str(mount_dir)
    return out
