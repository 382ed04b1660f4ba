"""The report of one running call: the `shoal.report` session a worker or a rank opens.

The same code serves the local worker, the ranks of a gang and the pods of a Kubernetes run:
the page goes to `report_uri` of the run's store through the Store protocol, whatever store
that is (``file://`` here, ``s3://``/``gs://`` on a cluster).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from shoal._runtime.observe.report_page import Report, render_page
from shoal.errors import StoreError


@dataclass
class ReportSession:
    """The report of one running task call (one rank, for clustered tasks).

    ``write`` stores the rendered page (bytes) atomically; None when this process's report is
    not stored, and ``not_stored`` then says why (the warning users see).
    """

    report: Report
    facts: list[tuple[str, str]]
    write: Callable[[bytes], None] | None
    not_stored: str = ""
    note: str = ""
    status: str = "running"
    warned: bool = field(default=False, init=False)

    def render(self) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        facts = [*self.facts, ("status", self.status), ("written", stamp)]
        return render_page(self.report, title=self.report.name, facts=facts, note=self.note)

    def flush(self) -> None:
        if self.write is None:
            return
        # Render and write under the report's lock: two flushes from threads (``.aio``) must
        # not store an older page over a newer one.
        with self.report.lock:
            self.write(self.render().encode())

    def finish(self, error: BaseException | None) -> None:
        """The last write, with the outcome. A store failure here is printed to the task's log
        and does not change the task's result: the report observes the work, it is not it."""
        self.status = "finished" if error is None else f"failed: {type(error).__name__}: {error}"
        try:
            self.flush()
        except StoreError as e:
            print(f"shoal: the report of this task could not be stored: {e}", file=sys.stderr)


_current: ContextVar[ReportSession | None] = ContextVar("shoal_report", default=None)


def current_session() -> ReportSession | None:
    """The report session of the running call; None outside one."""
    return _current.get()


@contextmanager
def reporting(session: ReportSession) -> Iterator[ReportSession]:
    """Make ``session`` the report of the body, and write it at the end (runtime use only)."""
    token = _current.set(session)
    error: BaseException | None = None
    try:
        yield session
    except BaseException as e:
        error = e
        raise
    finally:
        _current.reset(token)
        session.finish(error)


def report_scope(task: Any, *, store: str, run: str, action: str, attempt: int,
                 rank: int = 0, world_size: int = 1,
                 restart: int | None = None) -> AbstractContextManager[Any]:
    """Around the task's body: its report session when the task says ``report=True``."""
    if not task.report:
        return nullcontext()
    from shoal._storage.report_store import report_uri
    from shoal._storage.store import open_store

    facts = [("run", run), ("action", action), ("attempt", str(attempt))]
    note = ""
    if world_size > 1:
        facts.append(("rank", f"{rank} of {world_size}"))
        if restart:
            facts.append(("group restart", str(restart)))
        note = ("Clustered task: this is rank 0's report; Shoal keeps one report per task "
                "call, rank 0's (other ranks' report calls are not stored).")
    if rank != 0:
        return reporting(ReportSession(
            Report(task.name), facts, write=None,
            not_stored=(f"shoal.report: rank {rank} of clustered task {task.name!r}: Shoal "
                        "keeps rank 0's report only, so what this rank logs is not stored. "
                        "Fix: log from rank 0 (`if shoal.ctx().rank == 0:`)")))
    target, uri = open_store(store), report_uri(store, run, action, attempt)

    def write(page: bytes) -> None:
        target.put_bytes(uri, page)  # atomic on every backend (temp + rename, single PUT)

    return reporting(ReportSession(Report(task.name), facts, write=write, note=note))
