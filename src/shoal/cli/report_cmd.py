"""`shoal report RUN [--action A] [--attempt N] [--out FILE]`: save a task's HTML report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")
    p.add_argument("--action", default=None,
                   help="the action whose report to save (default: the run's root action, a0)")
    p.add_argument("--attempt", type=int, default=None,
                   help="which attempt (default: the latest attempt that has a report)")
    p.add_argument("--out", default=None,
                   help="where to write the HTML (default: ./<run>-<action>.html)")
    p.add_argument("--store", default=None,
                   help="read from this store root, RUN named in full, without the local "
                        "records (a Kubernetes run's records live in its driver pod)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._storage.records import Records
    from shoal._storage.report_store import stored_reports
    from shoal._storage.store import open_store
    from shoal.errors import NotFoundError

    if args.store is not None:
        name, store = args.run, open_store(args.store)
    else:
        run = Records(contract.home() / "shoal.db").get_run(args.run)
        name, store = run.name, open_store(run.store)
    reports = stored_reports(store, name)
    action = args.action or "a0"
    mine = [r for r in reports if r.action == action]
    if args.attempt is not None:
        mine = [r for r in mine if r.attempt == args.attempt]
    if not mine:
        asked = f"action {action}" + ("" if args.attempt is None else f" attempt {args.attempt}")
        if reports:
            have = ", ".join(f"{r.action} (attempt {r.attempt})" for r in reports[:20])
            more = ", ..." if len(reports) > 20 else ""
            fix = f"pass --action/--attempt of one that has: {have}{more}"
        else:
            fix = ("no task of this run kept a report; declare the task with "
                   "@env.task(report=True) and write it with shoal.report.log(...)")
            if args.store is not None:
                fix += f" (and check that {name!r} is the run's full name in {store.root})"
        raise NotFoundError(f"run {name} has no report for {asked}. Fix: {fix}")
    chosen = mine[-1]
    out = Path(args.out) if args.out else Path(f"{name}-{chosen.action}.html")
    # The report may be rewritten while the task runs: fetch one whole object, then write it
    # next to the destination and rename, so the saved file is never half a page either.
    page = store.get_bytes(chosen.uri)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    tmp.write_bytes(page)
    tmp.replace(out)
    print(f"saved the report of {name} {chosen.action} attempt {chosen.attempt} to {out}",
          file=sys.stderr)
    print(out)
    return 0
