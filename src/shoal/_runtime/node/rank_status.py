"""What a rank tells the outside while it runs: its last step and the collective it is in.

Hang diagnosis (see `shoal._runtime.node.hang`) must learn, from outside a rank that may be frozen,
how far it got and where it waits. Three pieces, all cheap for the rank:

- the collective slot: torch.distributed's collectives are wrapped (``wrap_collectives``, from
  `frameworks`) to put their name and start time into a process-global slot and clear it on
  return (the cost per call: benchmarks/results/*-collective-wrapper.md);
- the status file ``rank<N>.status.json``: the metrics flusher thread, which wakes every
  `metrics.FLUSH_INTERVAL` anyway, rewrites it when the step or the slot changed (never on the
  training thread, so a status may be up to that interval old);
- a stack file: ``faulthandler`` is registered for `STACKS_SIGNAL`, so the node launcher can
  ask a live rank for every thread's Python stack without a debugger.
"""

from __future__ import annotations

import faulthandler
import functools
import json
import os
import re
import signal
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from shoal._contract import NodeEnv

if TYPE_CHECKING:
    from shoal._runtime.observe import MetricsWriter

# gloo: "Timed out waiting 5000ms for recv operation"; NCCL: "Watchdog caught collective
# operation timeout"; torch's own: "... timeout ...".
_TIMEOUT_WORDS = re.compile(r"timed out|timeout", re.IGNORECASE)
STACKS_SIGNAL = signal.SIGUSR2  # the launcher sends it; faulthandler writes the stacks
# torch.distributed functions that block until peers take part. The *_object variants call
# the plain ones: only the outermost call is recorded.
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "broadcast", "broadcast_object_list",
    "gather", "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "send", "recv", "batch_isend_irecv",
)

# [name, started (epoch seconds)] of the collective this process is in; name None when none.
# A list, not a dataclass: two item stores is the whole cost on the training thread.
_slot: list[Any] = [None, 0.0]
# The collective that raised last, as (name, started, failed at): a timeout leaves it here.
_failed: list[Any] = [None, 0.0, 0.0]


def status_dir(node: NodeEnv) -> Path:
    """Where a node's ranks keep their status and stack files: the gang's log folder on the
    local engine (so `shoal logs` finds the stacks), else a folder of the node's own."""
    if node.rank_log_dir:
        return Path(node.rank_log_dir)
    name = f"shoal-{node.run}-{node.action}.{node.attempt}-r{node.restart_attempt}"
    return Path(tempfile.gettempdir()) / name


def status_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.status.json"


def raw_stacks_path(folder: Path, rank: int) -> Path:
    """faulthandler's output, before the launcher adds what it knows of the rank."""
    return folder / f"rank{rank}.faulthandler.txt"


def _wrap(name: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if _slot[0] is not None:  # inside another collective (all_gather_object's all_gather)
            return fn(*args, **kwargs)
        _slot[1] = time.time()
        _slot[0] = name
        try:
            return fn(*args, **kwargs)
        except BaseException:
            _failed[:] = [name, _slot[1], time.time()]
            raise
        finally:
            _slot[0] = None

    collective.__shoal_collective__ = True  # type: ignore[attr-defined]
    return collective


def wrap_collectives(*modules: Any) -> None:
    """Replace each collective of ``modules`` (``torch.distributed`` and its ``c10d``) by one
    that fills the slot. Before the user's code imports them, so ``from torch.distributed
    import all_reduce`` gets the wrapped one too. Collectives that torch's C++ runs itself
    (DDP's gradient buckets) are not seen here; the stack dump shows them."""
    wrapped: dict[int, Any] = {}
    for module in modules:
        for name in COLLECTIVES:
            fn = getattr(module, name, None)
            if fn is None or getattr(fn, "__shoal_collective__", False):
                continue
            new = wrapped.setdefault(id(fn), _wrap(name, fn))
            setattr(module, name, new)


def current_collective() -> tuple[str, float] | None:
    name = _slot[0]
    return None if name is None else (name, float(_slot[1]))


def failed_collective() -> dict[str, Any] | None:
    """The collective whose exception is being reported, if one raised."""
    if _failed[0] is None:
        return None
    return {"name": _failed[0], "since": _failed[1], "failed_at": _failed[2]}


class RankStatus:
    """Publishes one rank's status file; `publish` runs on the metrics flusher thread."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.path = status_path(folder, rank)
        self.rank = rank
        self._last: tuple[Any, ...] | None = None
        self._step: int | None = None
        self._step_at: float | None = None
        self._stacks: IO[str] | None = None
        self.writer: MetricsWriter | None = None
        folder.mkdir(parents=True, exist_ok=True)
        self.publish(None)

    def register_stacks(self) -> None:
        """Let the launcher ask for this rank's Python stacks (every thread) by a signal."""
        self._stacks = open(raw_stacks_path(self.path.parent, self.rank), "w")  # noqa: SIM115
        faulthandler.register(STACKS_SIGNAL, file=self._stacks, all_threads=True)

    def publish(self, step: int | None) -> None:
        """Rewrite the file if the step or the collective changed since the last call."""
        if step is not None and step != self._step:
            self._step, self._step_at = step, time.time()
        in_collective = current_collective()
        state = (self._step, in_collective, _failed[0])
        if state == self._last:
            return
        self._last = state
        data = {"rank": self.rank, "pid": os.getpid(), "step": self._step,
                "step_at": self._step_at, "updated": time.time(),
                "collective": in_collective[0] if in_collective else None,
                "collective_since": in_collective[1] if in_collective else None,
                "failed_collective": failed_collective()}
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)  # a reader never sees half a file
        except OSError:
            pass  # a full disk must not fail training; the diagnosis then says "no status"


def read_status(folder: Path, rank: int) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(status_path(folder, rank).read_text())
    except (OSError, ValueError):
        return None
    return data


_current: RankStatus | None = None


def start(node: NodeEnv, rank: int, writer: MetricsWriter) -> RankStatus:
    """At rank start, inside its metrics scope: status published by the metrics flusher,
    stacks on `STACKS_SIGNAL`."""
    global _current
    status = RankStatus(status_dir(node), rank)
    status.register_stacks()
    writer.on_tick = status.publish
    writer.start()  # the status is published by its thread, whether or not points come
    _current = status
    status.writer = writer
    return status


def failure_fields(error: BaseException, timeout: float | None = None) -> dict[str, Any]:
    """What a failing rank adds to its failure report: the collective it failed in and
    whether the failure is a timeout (the engine then diagnoses the gang before ending it).

    A collective that failed after waiting at least 0.9 x the gang's collective ``timeout``
    counts as a timeout whatever its text: the peer that timed out first closes its
    connections as it exits, so the others report "Connection closed by peer" at that moment.
    """
    failed = failed_collective()
    if _current is not None:  # the last status on disk says where the rank stopped
        _current.publish(_current.writer.last_step if _current.writer else None)
    text = f"{type(error).__name__}: {error}"
    said = bool(_TIMEOUT_WORDS.search(text)) and (
        failed is not None or "distributed" in type(error).__module__
        or "gloo" in text.lower() or "nccl" in text.lower())
    waited = failed is not None and timeout is not None and (
        float(failed["failed_at"]) - float(failed["since"]) >= 0.9 * timeout)
    return {"collective": failed, "collective_timeout": said or waited}
