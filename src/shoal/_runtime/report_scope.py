"""The report of one running call: the `shoal.report` session a worker or a rank opens.

The same code serves the local worker, the ranks of a gang and the pods of a Kubernetes run:
the page goes to `report_uri` of the run's store through the Store protocol, whatever store
that is (``file://`` here, ``s3://``/``gs://`` on a cluster).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from shoal._api.report import ReportSession, reporting
from shoal._api.report_page import Report


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
