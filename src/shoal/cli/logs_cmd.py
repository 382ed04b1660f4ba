"""`shoal logs RUN [--action A] [--attempt N]`: what a run's tasks printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")
    p.add_argument("--action", default=None, help="only this action (e.g. a0.3)")
    p.add_argument("--attempt", type=int, default=None, help="only this attempt (default: all)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal._runtime import contract
    from shoal._storage.records import Records
    from shoal.errors import NotFoundError

    records = Records(contract.home() / "shoal.db")
    run = records.get_run(args.run)
    attempts = records.list_attempts(run.name, args.action)
    if args.action is not None and not attempts:
        known = ", ".join(a.action_id for a in records.list_actions(run.name)[:20])
        raise NotFoundError(f"--action={args.action!r}: run {run.name} has no such action. "
                            f"Fix: use one of: {known or 'none (nothing ran yet)'}")
    tasks = {a.action_id: a.task for a in records.list_actions(run.name)}
    for att in attempts:
        if args.attempt is not None and att.attempt != args.attempt:
            continue
        print(f"==> {att.action_id} {tasks.get(att.action_id, '?')} attempt {att.attempt} "
              f"({att.state}) <==")
        path = Path(att.log_path) if att.log_path else None
        if path is None or not path.exists():
            print("(no output)")
            continue
        sys.stdout.write(path.read_text(errors="replace"))
        sys.stdout.flush()
    return 0
