"""Asking a run to stop (``cancel``) or to preempt its running gangs (``preempt``): the one flow
behind `shoal cancel`, `shoal preempt` and the web UI's two buttons.

A run driven here gets the request in the records, which its driver polls. A run whose driver
runs elsewhere (a Kubernetes driver pod) gets it as an object in its store folder, once what
that driver published there says the run has not ended. What follows the request is the
caller's: `shoal cancel` waits for the run to end (`remote_control.follow_cancel` for a driver
elsewhere, which may be gone); `shoal preempt` and the UI say it was asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from shoal._storage.records import (
    Records,
    RunRecord,
    driver_folder,
    put_request,
    refresh,
    unreachable,
)
from shoal._storage.store import open_store
from shoal.errors import StoreError

Kind = Literal["cancel", "preempt"]


@dataclass(frozen=True)
class StopAsked:
    """What asking did."""

    run: RunRecord  # the run when asked (with its driver's published state, if elsewhere)
    requested: bool  # False: the run had already ended, and nothing was asked
    where: dict[str, Any] | None  # its driver elsewhere (`driver_folder`); None: driven here


def ask(records: Records, run: RunRecord, kind: Kind, *, by: str, home: Path) -> StopAsked:
    """Ask ``run``'s driver to ``cancel`` the run or ``preempt`` its gangs; ``by`` names who
    asks, for the request's record. Raises `StoreError` when the store of a run driven
    elsewhere cannot be read or written from here."""
    where = driver_folder(records, run)
    if where is None:
        asked = (records.request_cancel(run.name) if kind == "cancel"
                 else records.request_preempt(run.name, by))
        return StopAsked(run=run, requested=asked, where=None)
    run = refresh(records, run, home=home)
    if run.terminal:
        return StopAsked(run=run, requested=False, where=where)
    try:
        put_request(open_store(run.store), str(where["io"]), kind, by)
    except StoreError as e:
        raise unreachable(run.name, run.store, e) from e
    return StopAsked(run=run, requested=True, where=where)
