"""Where task reports (`shoal.report`) live in the object store, and which a run has.

One report per attempt of an action, in the attempt's folder next to a gang's inputs, outputs
and failure reports: ``<store>/runs/<run>/<action>/<attempt>/report.html``. The runtime writes
there (worker and rank, on every engine); ``shoal report`` and the web UI read there, through
`report_uri` and `stored_reports` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal._storage.store import Store, join

REPORT_FILE = "report.html"


def report_uri(store: str, run: str, action: str, attempt: int) -> str:
    """The store URI of the report of one attempt of one action of a run."""
    return join(store, "runs", run, action, str(attempt), REPORT_FILE)


@dataclass(frozen=True)
class StoredReport:
    action: str
    attempt: int
    uri: str


def stored_reports(store: Store, run: str) -> list[StoredReport]:
    """Every report a run has, by action then attempt (oldest attempt first)."""
    found: list[StoredReport] = []
    prefix = join(store.root, "runs", run)
    for uri in store.list(prefix):
        parts = uri[len(prefix):].strip("/").split("/")
        if len(parts) == 3 and parts[2] == REPORT_FILE and parts[1].isdigit():
            found.append(StoredReport(action=parts[0], attempt=int(parts[1]), uri=uri))
    return sorted(found, key=lambda r: (_action_key(r.action), r.attempt))


def _action_key(action: str) -> tuple[int, ...]:
    """``a0.10`` after ``a0.9``: actions sort by their numbers, not as strings."""
    return tuple(int(p) if p.isdigit() else -1 for p in action.lstrip("a").split("."))
