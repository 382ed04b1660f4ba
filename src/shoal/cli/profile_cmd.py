"""`shoal profile RUN [--action A]`: where each profiled step's time went, per rank.

For every profiled window of the run (``shoal run --profile ENV:...`` or ``shoal.Profile``):
the verdict ("data-bound: 61% of step time waiting for data, on all ranks"), compute,
communication (and how much of it overlapped compute), data loading and idle per rank and
step, and the straggler table. The summary is kept as ``<window>.summary.json`` beside the
traces' folder.
"""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")
    p.add_argument("--action", default=None, help="only this action's profiles, e.g. a0.1")
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    p.add_argument("--store", default=None,
                   help="read the traces from this store root, RUN named in full (a "
                        "Kubernetes run's pods leave them there)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._storage import profile_files
    from shoal._storage.profile_summary import render
    from shoal._storage.records import Records
    from shoal._storage.store import open_store
    from shoal.errors import NotFoundError

    home = contract.home()
    if args.store is not None:
        name = args.run
        profile_files.fetch_from_store(open_store(args.store), name, home)
    else:
        run = Records(home / "shoal.db").get_run(args.run)
        name = run.name
        if not run.store.startswith("file://"):
            profile_files.fetch_from_store(open_store(run.store), name, home)
    found = profile_files.windows(home, name, args.action)
    if not found:
        which = f" for action {args.action}" if args.action else ""
        raise NotFoundError(
            f"run {name} has no profiles{which}. Fix: profile an environment when you run it, "
            "e.g. `shoal run --profile ENV:ranks=all:steps=10-12 FILE TASK` (its task must "
            "report steps with shoal.log_metrics(..., step=N), or use :seconds=30-40); "
            f"profiles are looked for under {profile_files.profiles_dir(home, name)}")
    out: list[dict[str, object]] = []
    for w in found:
        summary = profile_files.window_summary(w)
        if args.json:
            out.append({"action": w.action, "attempt": w.attempt, "restart": w.restart,
                        "window": w.window, "folder": str(w.folder), "summary": summary})
            continue
        print(f"== {name} {w.label}: {w.folder}")
        if summary is not None:
            print(render(summary))
        for extra in w.other_files():
            print(f"   {extra.name}")
        print()
    if args.json:
        print(json.dumps(out, indent=1))
    return 0
