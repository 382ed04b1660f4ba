"""Which environment variables hold secrets, by their names, and how they are shown.

A variable named like ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*`` or ``*_KEY`` (any case) is taken
to hold a secret: its value reaches the task's process, but never a printed plan, a log, a record
or a manifest, where it reads ``<redacted>``. One name is exempt: ``TOKENIZERS_PARALLELISM``,
Hugging Face tokenizers' switch, which every pretraining pipeline sets and which holds no secret.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

SECRET_NAME_PATTERNS = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*_KEY")
NOT_SECRETS = frozenset({"TOKENIZERS_PARALLELISM"})
REDACTED = "<redacted>"


def looks_secret(name: str) -> bool:
    upper = name.upper()
    if upper in NOT_SECRETS:
        return False
    return any(fnmatch.fnmatchcase(upper, p) for p in SECRET_NAME_PATTERNS)


def redacted(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as it may be shown: the values of secret-looking names replaced."""
    return {k: REDACTED if looks_secret(k) else v for k, v in environ.items()}
