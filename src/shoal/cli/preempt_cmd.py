"""`shoal preempt RUN`: preempt the running gangs of a run, as a higher-priority job would.

Each gang gets SIGTERM and its grace period (ranks can checkpoint), is requeued and restarts
when readmitted: without using a restart if its policy says resume_after_preemption=True.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._storage.records import Records, driver_folder, refresh

    records = Records(contract.home() / "shoal.db")
    records.reap_dead_runs()
    run = records.get_run(args.run)
    where = driver_folder(records, run)
    if where is not None:
        run = refresh(records, run, home=contract.home())
        if run.terminal:
            print(f"run {run.name} already ended ({run.state}); nothing to preempt")
            return 1
        from shoal._driver import remote_control

        remote_control.preempt(run, where)
        print(f"preemption requested for {run.name}; its driver on {run.engine} carries it "
              "out when it next reads the store (about a second)")
        return 0
    if not records.request_preempt(run.name, "`shoal preempt`"):
        print(f"run {run.name} already ended ({run.state}); nothing to preempt")
        return 1
    print(f"preemption requested for {run.name}; its driver (pid {run.engine_pid}) carries it "
          "out within a second")
    return 0
