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
    from shoal._storage.records import Records, driver_folder

    records = Records(contract.home() / "shoal.db")
    records.reap_dead_runs()
    run = records.get_run(args.run)
    where = driver_folder(records, run)
    if where is not None:
        return _cancel_remote(records, run, where, args.wait)
    if not records.request_cancel(run.name):
        if run.engine == "slurm" and run.state == "crashed":
            return _cancel_slurm_jobs(run.name)
        print(f"run {run.name} already ended ({run.state}); nothing to cancel")
        return 0
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


def _cancel_slurm_jobs(run: str) -> int:
    """A Slurm run whose driver died may have left its jobs running: scancel them."""
    from shoal._engines.slurm.engine import cancel_jobs_of

    jobs = cancel_jobs_of(run)
    print(f"run {run} crashed (its driver is gone); " + (
        f"cancelled its Slurm job(s) {', '.join(jobs)}" if jobs else "no Slurm job of it is left"))
    return 0


def _cancel_remote(records: Any, run: Any, where: dict[str, Any], wait: float) -> int:
    """A run whose driver runs elsewhere: the request goes through the store."""
    from shoal import _contract as contract
    from shoal._driver import remote_control
    from shoal._storage.records import refresh

    run = refresh(records, run, home=contract.home())
    if run.terminal:
        print(f"run {run.name} already ended ({run.state}); nothing to cancel")
        return 0
    run = remote_control.cancel(records, run, where, wait=wait, say=print)
    if run.terminal:
        print(f"run {run.name}: {run.state}")
        return 0
    print(f"run {run.name} has not stopped after {wait:g}s; its driver carries the request out "
          "when it next reads the store")
    return 1
