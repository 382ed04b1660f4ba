"""Which values look like credentials, whatever the variable holding them is called.

Three kinds are recognised, most certain first:

* a known token format, found anywhere in the value: OpenAI/Anthropic ``sk-``, GitHub ``ghp_``
  ``gho_`` ``ghu_`` ``ghs_`` ``ghr_`` ``github_pat_``, Slack ``xox?-``, AWS access key ids
  ``AKIA``/``ASIA``, Hugging Face ``hf_``, GitLab ``glpat-``, Google ``AIza``, Stripe
  ``sk_live_``/``rk_live_``, npm ``npm_``, PyPI ``pypi-``, a JWT (``eyJ…``, three parts), a PEM
  private key (``-----BEGIN … PRIVATE KEY-----``). Each needs a body of the format's length
  (``hf_transfer`` and ``sk-1`` are not tokens);
* a URL with a password: ``scheme://user:password@host`` (``postgres://u:p@db/x``);
* a long random-looking string: a run of 32 or more characters of the base64 / base64url
  alphabet with at least 3.5 bits of Shannon entropy a character, letters and digits (or both
  cases) mixed, and less than half of it made of word-like pieces (letter runs of four or more,
  number runs of three or more). That last test is what keeps paths, model names and
  identifiers out (``/checkpoints/Llama3_8B/run42/step_001000``,
  ``unsloth/Meta-Llama-3_1-8B-Instruct-bnb-4bit``, ``TransformerEncoderLayerWithRotaryEmbedding``
  are words and numbers). Hexadecimal strings are not flagged by this rule: a 40- or 64-digit
  hex value is as likely a commit, a digest or a run id as a key (a W&B key is hex, and is
  recognised by its name, ``WANDB_API_KEY``).

The third rule is a heuristic and says so: it misses a few percent of random 32-character
tokens (fewer the longer they are; tests/unit/test_secret_values.py measures it), which is why
names are checked as well (`shoal._spec.secret_names`). Pure: strings in, a reason out.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["credential_kind"]

_EDGE = r"(?<![A-Za-z0-9])"  # a token starts a word: "mask-" is not "sk-"
_FORMATS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(pattern)) for what, pattern in (
        ("a PEM private key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"),
        ("a GitHub token", _EDGE + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        ("a Stripe key", _EDGE + r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        ("an API key of the sk- form (OpenAI, Anthropic)", _EDGE + r"sk-[A-Za-z0-9_-]{20,}"),
        ("a Slack token", _EDGE + r"xox[abposr]-[A-Za-z0-9-]{10,}"),
        ("an AWS access key id", _EDGE + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("a Hugging Face token", _EDGE + r"hf_[A-Za-z0-9]{30,}"),
        ("a GitLab token", _EDGE + r"glpat-[A-Za-z0-9_-]{20,}"),
        ("a Google API key", _EDGE + r"AIza[A-Za-z0-9_-]{35}"),
        ("an npm token", _EDGE + r"npm_[A-Za-z0-9]{36}"),
        ("a PyPI token", _EDGE + r"pypi-[A-Za-z0-9_-]{50,}"),
        ("a JSON Web Token", _EDGE + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
        # The password part stops at '/', '@' and blanks: "http://host:8080/a@b" has none.
        ("a URL with a password", r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"),
    ))

_RUN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
_HEX = re.compile(r"[0-9a-fA-F-]+")
_CHUNK = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
MIN_RUN = 32
MIN_ENTROPY = 3.5  # bits a character; a random 32-character token has 3.8 at the very least
MAX_WORDS = 0.5  # the share of a run's letters and digits in word-like pieces


def entropy(text: str) -> float:
    """Shannon entropy of ``text``'s characters, in bits a character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def _word_share(run: str) -> float:
    alnum = sum(ch.isalnum() for ch in run)
    words = sum(len(m) for m in _CHUNK.findall(run)
                if (m[-1].isalpha() and len(m) >= 4) or (m.isdigit() and len(m) >= 3))
    return words / alnum if alnum else 1.0


def _random_looking(run: str) -> bool:
    if _HEX.fullmatch(run):
        return False
    kinds = sum((any(c.isupper() for c in run), any(c.islower() for c in run),
                 any(c.isdigit() for c in run)))
    return kinds >= 2 and entropy(run) >= MIN_ENTROPY and _word_share(run) < MAX_WORDS


def credential_kind(value: str) -> str | None:
    """What credential ``value`` looks like ("a GitHub token"...), or None."""
    for what, pattern in _FORMATS:
        if pattern.search(value):
            return what
    if any(_random_looking(m.group()) for m in _RUN.finditer(value)):
        return f"a long random-looking string (>= {MIN_RUN} characters, high entropy)"
    return None
