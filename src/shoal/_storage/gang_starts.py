"""The starts of each gang attempt, read from the run's events: how many nodes and ranks each
start had, why it began, and (an elastic gang) the resize that led to it.

The local engine records one ``gang_started`` event per start (``restart``, ``nnodes``,
``nproc_per_node``, ``world_size``, ``cause``, ``min_nnodes``, ``max_nnodes``) and, before the
start of a gang whose size changed, a ``gang_resized`` event (``from``, ``to``, ``cause``,
``reason``, ``nodes``). `shoal runs RUN`, `shoal logs` and the web UI's gang panel all read the
starts through `gang_starts`, so the three say the same about one start.

The events carry the restart, not the attempt: an event belongs to the last attempt of its
action started at or before it. Records of an older Shoal lack the new fields: their cause is
``restart`` after the first start, else ``first_start``, and their world size is
``nnodes × nproc_per_node`` where those are known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shoal._spec.call import START_CAUSES

if TYPE_CHECKING:  # (a type only: the records package imports the logs, which import this)
    from shoal._storage.records import AttemptRecord, EventRecord

__all__ = ["GangStart", "Resize", "attempt_of", "gang_starts", "size_changed"]


@dataclass(frozen=True)
class Resize:
    """What a ``gang_resized`` event said: the node count before and after, and why."""

    from_nodes: int | None
    to_nodes: int | None
    cause: str
    reason: str
    nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class GangStart:
    """One start of a gang attempt (``restart`` k: its logs are in ``r<k>/``)."""

    action: str
    attempt: int
    restart: int
    at: float
    nnodes: int | None
    nproc_per_node: int | None
    world_size: int | None
    cause: str  # a key of START_CAUSES (or an unknown one from a newer Shoal, shown as it is)
    min_nnodes: int | None
    max_nnodes: int | None
    resize: Resize | None  # the resize this start began with, if it did

    @property
    def cause_text(self) -> str:
        return START_CAUSES.get(self.cause, self.cause.replace("_", " "))

    @property
    def elastic(self) -> bool:
        return (self.min_nnodes is not None and self.max_nnodes is not None
                and self.min_nnodes < self.max_nnodes)

    @property
    def world(self) -> str:
        """``2×4``: nodes × ranks per node, ``""`` where unknown."""
        if self.nnodes is None or self.nproc_per_node is None:
            return ""
        return f"{self.nnodes}×{self.nproc_per_node}"


def _int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def attempt_of(e: EventRecord, attempts: Sequence[AttemptRecord]) -> int:
    """The last attempt of the event's action started at or before it (0 if none is)."""
    found = 0
    for a in attempts:
        if a.action_id == e.action_id and a.started_at <= e.at:
            found = max(found, a.attempt)
    return found


def gang_starts(events: Sequence[EventRecord],
                attempts: Sequence[AttemptRecord]) -> dict[tuple[str, int], list[GangStart]]:
    """(action, attempt) -> its starts in the order they began, from a run's events (oldest
    first) and attempts. A ``gang_resized`` event is joined to the start of its ``restart``."""
    resizes: dict[tuple[str, int, int], Resize] = {}
    out: dict[tuple[str, int], list[GangStart]] = {}
    for e in events:
        if e.action_id is None or not isinstance(e.data, dict):
            continue
        data = e.data
        restart = _int(data, "restart")
        if restart is None:
            continue
        attempt = attempt_of(e, attempts)
        if e.kind == "gang_resized":
            resizes[(e.action_id, attempt, restart)] = Resize(
                from_nodes=_int(data, "from"), to_nodes=_int(data, "to"),
                cause=str(data.get("cause") or ""), reason=str(data.get("reason") or ""),
                nodes=tuple(n for n in data.get("nodes") or () if isinstance(n, int)))
        elif e.kind == "gang_started":
            nnodes, nproc = _int(data, "nnodes"), _int(data, "nproc_per_node")
            world = _int(data, "world_size")
            if world is None and nnodes is not None and nproc is not None:
                world = nnodes * nproc
            cause = data.get("cause")
            if not isinstance(cause, str) or not cause:
                cause = "restart" if restart > 0 else "first_start"
            out.setdefault((e.action_id, attempt), []).append(GangStart(
                action=e.action_id, attempt=attempt, restart=restart, at=e.at, nnodes=nnodes,
                nproc_per_node=nproc, world_size=world, cause=cause,
                min_nnodes=_int(data, "min_nnodes"), max_nnodes=_int(data, "max_nnodes"),
                resize=resizes.pop((e.action_id, attempt, restart), None)))
    return out


def size_changed(starts: Sequence[GangStart]) -> bool:
    """Whether the starts ran with different node counts (or one of them was a resize)."""
    return (len({s.nnodes for s in starts if s.nnodes is not None}) > 1
            or any(s.resize is not None for s in starts))
