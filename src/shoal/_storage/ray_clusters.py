"""The Ray clusters of a run's calls, read from its events, and where each node's Ray logs are.

The head node of a Ray call reports its cluster once it is up: one ``ray_cluster`` event per
gang start (``task``, ``restart``, ``dashboard_url``, ``address``, ``client_address`` and
``nodes``: each node's rank, group and address; on Kubernetes, what the RayJob's status says,
again as it changes). `shoal runs`, `shoal runs RUN` and the web
UI's gang panel read the clusters through `ray_clusters`, so the three show the same URL.

The event is a stored record, written by a process that ran the user's code: its fields are
untrusted. A dashboard URL is kept only when it is an absolute ``http(s)`` URL with a host and
no whitespace or control characters (`safe_url`), so neither a terminal nor a page gets an
escape sequence or a ``javascript:`` link from it; every other field is shown as text.

Once a node's raylet has ended, the node launcher copies Ray's own session logs (``raylet.out``,
``gcs_server.out`` on the head...) to ``ray-node<k>/`` in the start's log folder, beside
``node<k>.log``; `ray_log_files` lists them, the principal ones first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from shoal._storage.gang_starts import attempt_of

if TYPE_CHECKING:
    from shoal._storage.records import AttemptRecord, EventRecord

__all__ = ["PRINCIPAL_RAY_LOGS", "RAY_LOG_DIR", "RayCluster", "RayNode", "latest",
           "ray_clusters", "ray_log_dir", "ray_log_files", "safe_url"]

RAY_LOG_DIR = re.compile(r"ray-node(\d+)")
# What a reader wants first of a node's Ray logs: its raylet's, then (the head) its GCS's.
PRINCIPAL_RAY_LOGS = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err")
_LOG_SUFFIXES = (".out", ".err", ".log", ".txt")
_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f\\\"'<>`]")
_BARE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*:\d{1,5}(/\S*)?")
URL_CHARS = 2048


@dataclass(frozen=True)
class RayNode:
    """One node of a Ray cluster: its node rank, its group (``head`` or a worker group's
    name) and the address its raylet listens on."""

    node: int
    group: str
    address: str


@dataclass(frozen=True)
class RayCluster:
    """The Ray cluster of one start of a Ray call, as its head reported it."""

    action: str
    attempt: int
    restart: int
    at: float
    task: str
    dashboard_url: str | None  # None: none reported, or not a safe http(s) URL
    address: str  # the GCS address (``host:port``) a `ray.init(address=...)` dials
    client_address: str  # ``ray://host:port``, Ray's client server
    nodes: tuple[RayNode, ...]

    def group_of(self, node: int) -> str | None:
        return next((n.group for n in self.nodes if n.node == node), None)


def safe_url(value: object) -> str | None:
    """``value`` if it is an ``http``/``https`` URL with a host and nothing a terminal or an
    HTML attribute could take as more than a URL; else None. A bare ``host:port`` (KubeRay's
    ``status.dashboardURL`` has no scheme) is taken as ``http://host:port``."""
    if not isinstance(value, str) or not value or len(value) > URL_CHARS:
        return None
    if _UNSAFE.search(value):
        return None
    if _BARE.fullmatch(value):
        value = f"http://{value}"
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises on a port that is not a number
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
TEXT_CHARS = 200


def _text(data: dict[str, Any], key: str) -> str:
    """A text field, its control characters (a terminal's escapes) replaced, cut short."""
    value = data.get(key)
    return _CONTROL.sub("?", value[:TEXT_CHARS]) if isinstance(value, str) else ""


def _nodes(value: object) -> tuple[RayNode, ...]:
    if not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if not isinstance(item, dict):
            continue
        node = item.get("node")
        if isinstance(node, int) and not isinstance(node, bool) and node >= 0:
            out.append(RayNode(node=node, group=_text(item, "group"),
                               address=_text(item, "address")))
    return tuple(sorted(out, key=lambda n: n.node))


def ray_clusters(events: Sequence[EventRecord], attempts: Sequence[AttemptRecord],
                 ) -> dict[tuple[str, int], list[RayCluster]]:
    """(action, attempt) -> the clusters its starts reported, in the order they came up (one
    per start: a start reported again, as a Kubernetes RayJob's status is, keeps its last)."""
    out: dict[tuple[str, int], list[RayCluster]] = {}
    for e in events:
        if e.kind != "ray_cluster" or e.action_id is None or not isinstance(e.data, dict):
            continue
        data = e.data
        restart = data.get("restart")
        if not isinstance(restart, int) or isinstance(restart, bool):
            restart = 0
        attempt = attempt_of(e, attempts)
        mine = out.setdefault((e.action_id, attempt), [])
        mine[:] = [c for c in mine if c.restart != restart]
        mine.append(RayCluster(
            action=e.action_id, attempt=attempt, restart=restart, at=e.at,
            task=_text(data, "task"), dashboard_url=safe_url(data.get("dashboard_url")),
            address=_text(data, "address"), client_address=_text(data, "client_address"),
            nodes=_nodes(data.get("nodes"))))
    return out


def latest(clusters: dict[tuple[str, int], list[RayCluster]]) -> dict[str, RayCluster]:
    """action -> the cluster of its last attempt's last start: the one a user can open."""
    found: dict[str, RayCluster] = {}
    for (action, _), of_attempt in sorted(clusters.items()):
        if of_attempt:
            found[action] = of_attempt[-1]
    return found


def ray_log_dir(start_dir: Path, node: int) -> Path:
    """Where node ``node``'s Ray session logs are copied, in one start's log folder."""
    return start_dir / f"ray-node{node}"


def ray_log_files(folder: Path) -> list[Path]:
    """The log files of one node's copied Ray session logs: the principal ones (raylet, GCS)
    first, then the rest by name. Sub-folders (Ray's ``old/``) are left out: the files at
    the top are the session's own."""
    try:
        files = [p for p in folder.iterdir()
                 if p.is_file() and not p.is_symlink() and p.name.endswith(_LOG_SUFFIXES)]
    except OSError:
        return []
    rank = {name: i for i, name in enumerate(PRINCIPAL_RAY_LOGS)}
    return sorted(files, key=lambda p: (rank.get(p.name, len(rank)), p.name))
