"""The records of a run whose driver runs elsewhere (a Kubernetes driver pod), in the store.

The driver keeps its records in its own SQLite, where it runs; it publishes them as it goes
into the run's driver folder (the folder that also holds the root call's inputs and outcome),
and reads there what other machines ask of it:

    <store>/runs/<run>/driver/
        state.json                  the run's state, error and times: small, what `shoal runs`
                                    reads for each unfinished run
        records.json                the run, its actions, attempts and events (`snapshot`)
        logs/<action>.<attempt>.log the log of each plain call: run in the driver's pod, or
                                    its Job's pod log, kept when the Job ended
        logs/gang/<action>.<attempt>/r<restart>/node<i>.log   each node's pod log of a gang
        requests/cancel.json        `shoal cancel RUN`
        requests/preempt-<ns>.json  `shoal preempt RUN`, one object per request

The submitting machine records the run in its own file (engine ``kubernetes``, no pid: the
reaper leaves it alone) with a ``driver_submitted`` event naming this folder; its readers
merge what the driver published into that file (`refresh`), so `shoal runs`, `shoal logs`
and the web UI read the run as they read a local one. ``records.json`` is written before
``state.json``, so a reader that sees the run ended finds its final records.
"""

from __future__ import annotations

import json
import posixpath
import time
from pathlib import Path
from typing import Any

from shoal._spec.names import check_action_id, check_object_name
from shoal._storage.logs import gang_log_root
from shoal._storage.records.runs import Records, RunRecord
from shoal._storage.store import Store, join, open_store
from shoal.errors import ObjectNotFound, SpecError, StoreError

__all__ = ["RECORDS", "SUBMITTED", "RecordsPublisher", "driver_folder", "local_log", "put_request",
           "refresh", "unreachable"]

STATE, RECORDS, LOGS, REQUESTS, GANG = "state.json", "records.json", "logs", "requests", "gang"
SUBMITTED = "driver_submitted"  # the submitter's event: data {"io", "namespace", "selector"}
_STATE_FIELDS = ("state", "error", "started_at", "ended_at", "heartbeat_at")


class RecordsPublisher:
    """The driver's side: publish the run's records, collect the requests made of it."""

    def __init__(self, records: Records, run: str, store: Store, io: str, home: Path) -> None:
        self.records, self.run, self.store, self.io = records, run, store, io
        self.gangs = gang_log_root(home, run)
        self._sizes: dict[str, int] = {}  # log file -> bytes already published
        self._seen: set[str] = set()

    def publish(self) -> None:
        snap = self.records.snapshot(self.run)
        for attempt in snap["attempts"]:
            path = Path(attempt["log_path"]) if attempt.get("log_path") else None
            name = f"{attempt['action_id']}.{attempt['attempt']}.log"
            self._publish_log(path, join(self.io, LOGS, name))
        if self.gangs.is_dir():
            for path in sorted(self.gangs.rglob("*.log")):
                rel = path.relative_to(self.gangs).as_posix()
                self._publish_log(path, join(self.io, LOGS, GANG, *rel.split("/")))
        self.store.put_bytes(join(self.io, RECORDS), json.dumps(snap).encode())
        state = {k: snap["run"][k] for k in _STATE_FIELDS}
        self.store.put_bytes(join(self.io, STATE), json.dumps(
            {**state, "published_at": time.time()}).encode())

    def _publish_log(self, path: Path | None, uri: str) -> None:
        if path is None or not path.is_file():
            return  # a Job's pod log is kept once the Job has ended
        size = path.stat().st_size
        if self._sizes.get(str(path)) != size:
            self.store.put_file(path, uri)
            self._sizes[str(path)] = size

    def requests(self) -> list[str]:
        """The kinds (``cancel``, ``preempt``) of the requests made since the last call."""
        new = [u for u in self.store.list(join(self.io, REQUESTS)) if u not in self._seen]
        self._seen.update(new)
        return ["cancel" if posixpath.basename(u) == "cancel.json" else "preempt"
                for u in new]


def put_request(store: Store, io: str, kind: str, by: str) -> None:
    """Ask the run's driver to ``cancel`` or ``preempt`` (it polls its folder)."""
    name = "cancel.json" if kind == "cancel" else f"preempt-{time.time_ns()}.json"
    store.put_bytes(join(io, REQUESTS, name),
                    json.dumps({"kind": kind, "by": by, "at": time.time()}).encode())


def driver_folder(records: Records, run: RunRecord) -> dict[str, Any] | None:
    """What the submitter recorded about the run's driver (``io``, ``namespace``,
    ``selector``), or None for a run driven here."""
    if run.engine_pid is not None:
        return None
    for event in records.events(run.name, limit=20):
        if event.kind == SUBMITTED and isinstance(event.data, dict):
            return event.data
    return None


def local_log(home: Path, run: str, action: str, attempt: int) -> Path:
    """Where a published log of the driver lands on this machine."""
    return home / "runs" / run / "logs" / "driver" / f"{action}.{attempt}.log"


def unreachable(run: str, store: str, err: BaseException) -> StoreError:
    return StoreError(
        f"run {run}'s records are in the store {store}, which cannot be read from here "
        f"({err}). Fix: give this machine the store's credentials and endpoint (the "
        "AWS_* / GOOGLE_* variables, SHOAL_S3_ENDPOINT) that `shoal run` used to submit it")


def refresh(records: Records, run: RunRecord, *, home: Path, full: bool = False,
            logs: bool = False) -> RunRecord:
    """Merge what the driver of a run driven elsewhere published into ``records``: its state
    (one small object) while it has not ended here, and with ``full`` its actions, attempts
    and events, with ``logs`` also its log files. A run driven here comes back unchanged."""
    where = driver_folder(records, run)
    if where is None or (run.terminal and not (full or logs)):
        return run
    io = str(where["io"])
    try:
        store = open_store(run.store)
        if full or logs:
            snap = json.loads(store.get_bytes(join(io, RECORDS)))
            records.merge_snapshot(run.name, snap, lambda action, attempt: str(
                local_log(home, run.name, action, attempt)))
            if logs:
                _download_logs(store, join(io, LOGS), home, run.name)
        else:
            state = json.loads(store.get_bytes(join(io, STATE)))
            records.merge_snapshot(run.name, {"run": state})
    except ObjectNotFound:
        pass  # the driver has published nothing yet: still queued
    except StoreError as e:
        raise unreachable(run.name, run.store, e) from e
    except SpecError as e:  # a name that would leave its folder here, or forge a line
        raise StoreError(f"run {run.name}'s records in the store {run.store} are refused "
                         f"(what breaks its rule is not merged): {e}") from None
    return records.get_run(run.name, prefix=False)



def _download_logs(store: Store, logs: str, home: Path, run: str) -> None:
    """The published logs where this machine's readers look for a run's logs."""
    for uri in store.list(logs):
        key = uri[len(logs):].strip("/")
        rel = check_object_name(f"{logs}/", key).split("/")
        if rel[0] == GANG:
            dest = gang_log_root(home, run).joinpath(*rel[1:])
        else:
            parts = rel[-1].rsplit(".", 2)
            if len(rel) != 1 or len(parts) != 3 or not parts[1].isdigit():
                raise SpecError(f"{logs}/", key, "a published log is <action>.<attempt>.log",
                                "republish the records")
            action = check_action_id(f"{logs}/", parts[0])
            dest = local_log(home, run, action, int(parts[1]))
        dest.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(uri, dest)
