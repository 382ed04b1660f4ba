"""What follows `shoal cancel` for a run whose driver runs elsewhere (a Kubernetes driver pod),
once the request is in the run's store folder (`stop_requests`), and that driver's log.

A driver that is gone (its pod deleted, evicted, or ended without publishing an end) can
carry out nothing: cancel then deletes what would run it again (the driver Job) and records
the run cancelled here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from shoal import _contract as contract
from shoal._engines.base import RemoteDriver
from shoal._storage.records import Records, RunRecord, refresh
from shoal.errors import EngineError

POLL_SECONDS = 0.2


def driver_of(run: RunRecord, where: dict[str, Any]) -> RemoteDriver:
    """The submitting side of the run's engine, set up from its records alone."""
    if run.engine != "kubernetes":
        raise EngineError(f"run {run.name} ran on {run.engine!r}, which drives no run elsewhere")
    from shoal._engines.kubernetes.config import KubeConfig
    from shoal._engines.kubernetes.submit import KubeRemoteDriver

    return KubeRemoteDriver(KubeConfig(store=run.store,
                                       namespace=str(where.get("namespace") or "default")))


def follow_cancel(records: Records, run: RunRecord, where: dict[str, Any], *, wait: float,
                  say: Callable[[str], None]) -> RunRecord:
    """Wait up to ``wait`` seconds for a run asked to cancel to end; a driver that is gone has
    its Job deleted and the run recorded cancelled. The run as it stands at the end."""
    driver = driver_of(run, where)
    say(f"cancel requested for {run.name}; waiting for its driver ({where.get('selector')} "
        f"in namespace {where.get('namespace')})")
    if not _alive(driver, run, where):
        deleted = driver.stop(run.name, where)
        records.set_run_state(run.name, "cancelled", error=(
            f"cancelled: its driver was gone; deleted its {deleted} driver Job(s)"))
        say(f"run {run.name}: its driver is gone; deleted its {deleted} driver Job(s)")
        return records.get_run(run.name)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        run = refresh(records, run, home=contract.home())
        if run.terminal:
            return run
        time.sleep(POLL_SECONDS)
    return run


def driver_log(run: RunRecord, where: dict[str, Any]) -> tuple[list[str], str | None]:
    """The driver's log lines from the cluster, or why they cannot be read from here."""
    try:
        return driver_of(run, where).driver_log(run.name, where), None
    except EngineError as e:
        return [], str(e)


def _alive(driver: RemoteDriver, run: RunRecord, where: dict[str, Any]) -> bool:
    """Whether the driver is there; True when the cluster cannot tell from here (the request
    is in the store: a driver that comes back carries it out)."""
    try:
        return driver.driver_alive(run.name, where)
    except EngineError:
        return True
