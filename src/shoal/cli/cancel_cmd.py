"""`shoal cancel RUN`: ask the process driving a run to stop it, and wait until it has."""

from __future__ import annotations

import argparse
import time
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")
    p.add_argument("--wait", type=float, default=15.0,
                   help="seconds to wait for the run to stop (default 15)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._driver import stop_requests
    from shoal._storage.records import Records

    records = Records(contract.home() / "shoal.db")
    records.reap_dead_runs()
    run = records.get_run(args.run)
    asked = stop_requests.ask(records, run, "cancel", by="`shoal cancel`", home=contract.home())
    if not asked.requested:
        cleaned = _clean_up(run) if asked.where is None and run.state == "crashed" else None
        if cleaned is not None:
            print(cleaned)
            return 0
        print(f"run {asked.run.name} already ended ({asked.run.state}); nothing to cancel")
        return 0
    if asked.where is not None:
        return _follow_remote(records, asked.run, asked.where, args.wait)
    print(f"cancel requested for {run.name}; waiting for its driver (pid {run.engine_pid})")
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        records.reap_dead_runs()
        state = records.get_run(run.name).state
        if state not in ("queued", "running"):
            print(f"run {run.name}: {state}")
            return 0
        time.sleep(0.2)
    print(f"run {run.name} has not stopped after {args.wait:g}s; it will stop when its driver "
          "next checks (or is marked crashed if the driver is gone)")
    return 1


def _clean_up(run: Any) -> str | None:
    """A run whose driver died may have left work running on its engine's cluster: stopped,
    and what was (None where the engine leaves nothing behind)."""
    from shoal._driver.remote import clean_up

    return clean_up(run.engine, run.name)


def _follow_remote(records: Any, run: Any, where: dict[str, Any], wait: float) -> int:
    """A run whose driver runs elsewhere, asked through the store: wait for it to end."""
    from shoal._driver import remote_control

    run = remote_control.follow_cancel(records, run, where, wait=wait, say=print)
    if run.terminal:
        print(f"run {run.name}: {run.state}")
        return 0
    print(f"run {run.name} has not stopped after {wait:g}s; its driver carries the request out "
          "when it next reads the store")
    return 1
