"""Which environment variables hold secrets, by their names and their values, and how they show.

A variable is taken to hold a secret when its **name** says so or its **value** looks like a
credential (`shoal._spec.secret_values`). Its value still reaches the task's process, but never
a printed plan, a log, a record, an error message, a Slurm script or a Kubernetes manifest (a
manifest refuses it: the value belongs in a Kubernetes Secret, given as `shoal.Secret`); where
it would be shown it reads ``<redacted>``.

Names are read as words: the name is upper-cased and split at ``_``, and a secret name has a
word that is one of `SECRET_WORDS` (``API_KEY``, ``DB_PASSWD``, ``AUTH``, ``GH_PAT``) or ends
with one of `SECRET_SUFFIXES` (``OPENAI_APIKEY``, ``PGPASSWORD``, ``HFTOKEN``). Words, not
substrings, so that ``TOKENIZERS_PARALLELISM``, ``MAX_NEW_TOKENS``, ``AUTHOR``, ``KEYRING`` and
``MONKEY_PATCH`` hold no secret. A word after the secret one that names something else than the
secret itself (`NOT_THE_SECRET`: ``HF_TOKEN_PATH``, ``SSH_AUTH_SOCK``, ``EOS_TOKEN_ID``,
``SECRET_NAME``, ``MAX_TOKEN_LENGTH``) makes the name plain again; its value is still checked.
``PWD`` (the shell's working directory) is no password.

`NotSecret` marks a value as plain whatever its name and look: the way out of a false alarm
(``env_vars={"SORT_KEY": shoal.NotSecret("timestamp")}``). It is a ``str``, so code that reads
``env.env_vars`` sees the value as before, and it travels with the value through overrides,
``with_runcontext`` and the specs to every engine.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal._spec.secret_values import credential_kind
from shoal.errors import SpecError

__all__ = ["REDACTED", "NotSecret", "is_secret", "looks_secret", "redacted", "secret_reason",
           "shown"]

SECRET_WORDS = frozenset({
    "KEY", "APIKEY", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PWD", "PASSPHRASE",
    "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTH", "PAT",
})
SECRET_SUFFIXES = ("APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "TOKEN", "SECRET",
                   "PASSWORD", "PASSWD", "PASSPHRASE")
NOT_THE_SECRET = frozenset({
    "FILE", "FILES", "PATH", "DIR", "SOCK", "SOCKET", "URL", "URI", "ENDPOINT", "HOST", "PORT",
    "ID", "IDS", "NAME", "LEN", "LENGTH", "SIZE", "COUNT", "LIMIT", "TYPE", "MODE",
    "ENABLED", "DISABLED", "METHOD", "PROVIDER", "SCHEME",
})
PLAIN_NAMES = frozenset({"PWD", "OLDPWD"})
REDACTED = "<redacted>"


class NotSecret(str):
    """An env var value that is not a secret, whatever its name or look says:
    ``env_vars={"TOKEN_BUDGET": shoal.NotSecret("4096")}``. It is shown in plans, written into
    manifests and scripts as it is; without it a secret-looking value is redacted (and refused
    on Kubernetes)."""

    __slots__ = ()

    def __new__(cls, value: object) -> NotSecret:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SpecError("NotSecret(value)", type(value).__name__, "must be a string (or "
                            "a number)", 'e.g. shoal.NotSecret("timestamp")')
        return super().__new__(cls, str(value))

    def __repr__(self) -> str:
        return f"NotSecret({str.__repr__(self)})"


def _name_reason(name: str) -> str | None:
    upper = name.upper()
    if upper in PLAIN_NAMES:
        return None
    words = upper.split("_")
    for i, word in enumerate(words):
        if word in SECRET_WORDS or (word.endswith(SECRET_SUFFIXES) and len(word) > 3):
            if any(w in NOT_THE_SECRET for w in words[i + 1:]):
                return None
            return f"its name has the word {word}"
    return None


def looks_secret(name: str) -> bool:
    """Whether ``name`` alone says its variable holds a secret."""
    return _name_reason(name) is not None


def secret_reason(name: str, value: str) -> str | None:
    """Why the variable ``name`` = ``value`` is taken to hold a secret, or None."""
    if isinstance(value, NotSecret):
        return None
    reason = _name_reason(name)
    if reason is None and isinstance(value, str):
        kind = credential_kind(value)
        reason = None if kind is None else f"its value looks like {kind}"
    return reason


def is_secret(name: str, value: str) -> bool:
    return secret_reason(name, value) is not None


def shown(name: str, value: str) -> str:
    """``value`` as it may be printed, recorded or quoted in an error."""
    return REDACTED if is_secret(name, value) else value


def redacted(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as it may be shown: the values of secret variables replaced."""
    return {k: shown(k, v) for k, v in environ.items()}
