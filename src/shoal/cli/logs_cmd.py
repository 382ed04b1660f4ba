"""`shoal logs RUN [--action A] [--attempt N]`: what a run's tasks printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")
    p.add_argument("--action", default=None, help="only this action (e.g. a0.3)")
    p.add_argument("--attempt", type=int, default=None, help="only this attempt (default: all)")
    p.add_argument("--rank", type=int, default=None,
                   help="a clustered task's rank: its log for every attempt and restart")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal._runtime import contract
    from shoal._storage.records import Records
    from shoal.errors import NotFoundError

    records = Records(contract.home() / "shoal.db")
    run = records.get_run(args.run)
    if args.rank is not None:
        return _rank_logs(run.name, args)
    attempts = records.list_attempts(run.name, args.action)
    if args.action is not None and not attempts:
        known = ", ".join(a.action_id for a in records.list_actions(run.name)[:20])
        raise NotFoundError(f"--action={args.action!r}: run {run.name} has no such action. "
                            f"Fix: use one of: {known or 'none (nothing ran yet)'}")
    tasks = {a.action_id: ("/".join(a.group_path) + " › " if a.group_path else "") + a.task
             for a in records.list_actions(run.name)}
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


def _rank_logs(run: str, args: argparse.Namespace) -> int:
    """Logs of one rank: ``runs/<run>/logs/gang/<action>.<attempt>/r<restart>/rank<N>.log``."""
    from shoal._runtime import contract
    from shoal.errors import NotFoundError

    root = contract.home() / "runs" / run / "logs" / "gang"
    found = []
    for path in sorted(root.glob(f"*/r*/rank{args.rank}.log")):
        action, _, attempt = path.parent.parent.name.rpartition(".")
        if args.action is not None and action != args.action:
            continue
        if args.attempt is not None and attempt != str(args.attempt):
            continue
        found.append((action, attempt, path.parent.name, path))
    if not found:
        ranks = sorted({p.stem for p in root.glob("*/r*/rank*.log")})
        fix = f"use one of {', '.join(ranks)}" if ranks else "it ran no clustered task"
        raise NotFoundError(f"--rank={args.rank}: run {run} has no log of that rank. Fix: {fix}")
    for action, attempt, restart, path in found:
        print(f"==> {action} attempt {attempt} restart {restart[1:]} rank {args.rank} <==")
        sys.stdout.write(path.read_text(errors="replace"))
    sys.stdout.flush()
    return 0
