"""Names of the Kubernetes objects Shoal creates: valid, unique, deterministic and short enough.

Kubernetes derives names from names. A JobSet ``js`` with replicated job ``rj`` makes Jobs
``js-rj-<jobIdx>`` and, for Indexed Jobs, pods ``js-rj-<jobIdx>-<podIdx>-xxxxx`` whose hostname
(``js-rj-<jobIdx>-<podIdx>``) is a DNS label: every one of them must stay within 63 characters,
and JobSet's webhook rejects a JobSet whose *longest* pod name would not. So a name here is a
readable head (environment, run, action, attempt) cut to the room left, plus a hash of the exact
identity: two calls never share a name, however their readable parts were cut or spelled.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "DNS_LABEL_MAX",
    "HASH_LENGTH",
    "POD_SUFFIX",
    "RULE_NAME",
    "dns1035_label",
    "is_dns1035_label",
    "is_dns1123_label",
    "is_label_value",
    "job_name_room",
    "jobset_name_room",
    "label_value",
    "longest_pod_name",
    "rule_name",
    "short_hash",
]

DNS_LABEL_MAX = 63
HASH_LENGTH = 8  # hex digits of sha256: 32 bits, plenty for the calls of one namespace
# What the Job controller appends to a pod's name: "-" and five random characters.
POD_SUFFIX = "-xxxxx"
# JobSet's own rule for failure-policy rule names (no hyphens), and its length bounds.
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
RULE_NAME_MAX = 128

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def is_dns1035_label(value: str) -> bool:
    """A Service-style name: lower-case letters, digits and '-', starting with a letter."""
    return len(value) <= DNS_LABEL_MAX and bool(_DNS1035.match(value))


def is_dns1123_label(value: str) -> bool:
    """A DNS label (RFC 1123): like a DNS-1035 label but it may start with a digit."""
    return len(value) <= DNS_LABEL_MAX and bool(_DNS1123.match(value))


def is_label_value(value: str) -> bool:
    return len(value) <= DNS_LABEL_MAX and bool(_LABEL_VALUE.match(value))


def short_hash(*parts: str, length: int = HASH_LENGTH) -> str:
    """A stable hex digest of ``parts`` (NUL-separated, so ("ab", "c") != ("a", "bc"))."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def _slug(text: str) -> str:
    """Lower case; every run of characters outside [a-z0-9] becomes one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def dns1035_label(*parts: str, room: int = DNS_LABEL_MAX) -> str:
    """A DNS-1035 label of at most ``room`` characters naming ``parts`` exactly.

    ``dns1035_label("pretrain", "r-20261130", "a0.1", "0")`` is
    ``"pretrain-r-20261130-a0-1-0-<hash>"``; when that is too long the readable head is cut
    (never the hash). The head starts with a letter (an ``s`` is put first otherwise).
    """
    digest = short_hash(*parts)
    if room < len(digest) + 2:
        raise ValueError(f"no room for a name: {room} characters left")
    head = "-".join(s for s in (_slug(p) for p in parts) if s)
    if not head or not head[0].isalpha():
        head = f"s-{head}" if head else "s"
    head = head[: room - len(digest) - 1].rstrip("-")
    name = f"{head}-{digest}"
    assert is_dns1035_label(name), name  # internal invariant, not user input
    return name


def label_value(value: str) -> str:
    """``value`` itself when it is a valid label value, else a valid stand-in with its hash.

    Labels are for selecting (``kubectl get jobs -l shoal.dev/run=...``); the exact value
    always goes into an annotation as well.
    """
    if is_label_value(value):
        return value
    digest = short_hash(value)
    head = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)
    head = re.sub(r"^[^A-Za-z0-9]+", "", head)[: DNS_LABEL_MAX - len(digest) - 1]
    head = re.sub(r"[^A-Za-z0-9]+$", "", head)
    return f"{head}-{digest}" if head else digest


def longest_pod_name(jobset: str, replicated_job: str, replicas: int, completions: int) -> str:
    """The longest pod name JobSet will generate (what its webhook checks)."""
    return f"{jobset}-{replicated_job}-{replicas - 1}-{completions - 1}{POD_SUFFIX}"


def jobset_name_room(replicated_job: str, replicas: int, completions: int) -> int:
    """How long a JobSet name may be so that its longest pod name fits in a DNS label."""
    tail = len(longest_pod_name("", replicated_job, replicas, completions))
    return DNS_LABEL_MAX - tail


def job_name_room() -> int:
    """How long a plain Job's name may be: its pods are ``<job>-xxxxx`` and their hostname
    (the pod name) must be a DNS label."""
    return DNS_LABEL_MAX - len(POD_SUFFIX)


def rule_name(*words: str) -> str:
    """A JobSet failure-policy rule name from words: ``("resume", "after", "preemption")``
    gives ``"resumeAfterPreemption"``. Rule names may not hold hyphens."""
    pieces = [w for word in words for w in re.split(r"[^A-Za-z0-9]+", word) if w]
    if not pieces:
        raise ValueError("a rule name needs at least one word")
    name = pieces[0][0].lower() + pieces[0][1:] + "".join(p[0].upper() + p[1:]
                                                          for p in pieces[1:])
    if not name[0].isalpha():
        name = "r" + name
    name = name[:RULE_NAME_MAX]
    if not RULE_NAME.match(name):  # pragma: no cover - the construction above ensures it
        raise ValueError(f"not a valid rule name: {name!r}")
    return name
