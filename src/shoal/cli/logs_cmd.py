"""`shoal logs RUN [--action A] [--attempt N] [--rank R | --node K] [--grep RE] [--follow]
[--full]`: what a run's tasks and ranks printed.

Without ``--follow`` each attempt gets a ``==>`` header and its lines: a plain call's as they
are, a gang's prefixed ``[node n rank r attempt a]`` (``restart k`` after a gang restart), gang
restart by restart, node by node, rank by rank. ``--node K`` prints one node of each gang,
every attempt and restart, file by file under its own header: its ranks' logs, its launcher's
log and, for a Ray call whose node has stopped, Ray's own session logs of that node (the
raylet's and, on the head, the GCS server's printed whole, the others' names listed; with
``--grep``, all of them searched). ``--follow`` prints the lines of every file of
the run as they are written, each prefixed with its action and label, until the run ends.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shoal._storage.logs import LogSource
    from shoal._storage.records import Records, RunRecord

POLL = 0.2  # seconds between reads of a followed run's files
REAP_EVERY = 2.0  # seconds between checks that a followed run's driver is still alive


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run name (a unique prefix is enough)")
    p.add_argument("--action", default=None, help="only this action (e.g. a0.3)")
    p.add_argument("--attempt", type=int, default=None, help="only this attempt (default: all)")
    p.add_argument("--rank", type=int, default=None,
                   help="a clustered task's rank: its log for every attempt and restart")
    p.add_argument("--node", type=int, default=None,
                   help="a clustered task's node: its ranks', its launcher's and (a Ray "
                        "call) Ray's own logs, for every attempt and restart")
    p.add_argument("--grep", metavar="PATTERN", default=None,
                   help="only lines matching this Python regular expression")
    p.add_argument("-f", "--follow", action="store_true",
                   help="print lines as they are written, until the run ends (Ctrl-C stops)")
    p.add_argument("--full", action="store_true",
                   help="print very long lines whole (by default they are cut, with a marker)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal._storage.records import Records, refresh

    pattern = _pattern(args.grep)
    records = Records(contract.home() / "shoal.db")
    # a run driven elsewhere: its records and its driver's logs, from the store
    run = refresh(records, records.get_run(args.run), home=contract.home(), logs=True)
    if args.action is not None and not (args.follow and not run.terminal):
        _check_action(records, run.name, args.action)
    try:
        if args.follow:
            return _follow(records, run.name, args, pattern)
        if args.rank is not None:
            return _rank_logs(records, run.name, args, pattern)
        if args.node is not None:
            return _node_logs(records, run.name, args, pattern)
        driver = 0
        if args.action is None and args.attempt is None:
            driver = _driver_elsewhere(records, run, args, pattern)
        return _combined(records, run.name, args, pattern, driver)
    except KeyboardInterrupt:  # Ctrl-C is how a user stops reading, not an error
        return 0


def _pattern(text: str | None) -> re.Pattern[str] | None:
    from shoal.errors import SpecError

    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        raise SpecError("--grep", text, f"is not a Python regular expression ({e})",
                        "put a backslash before characters a regex treats specially, "
                        "e.g. 'loss\\(' for 'loss('") from None


def _check_action(records: Records, run: str, action: str) -> None:
    from shoal.errors import NotFoundError

    if not records.list_attempts(run, action):
        known = ", ".join(a.action_id for a in records.list_actions(run)[:20])
        raise NotFoundError(f"--action={action!r}: run {run} has no such action. "
                            f"Fix: use one of: {known or 'none (nothing ran yet)'}")


def _wanted(args: argparse.Namespace, source: LogSource) -> bool:
    return ((args.action is None or source.action == args.action)
            and (args.attempt is None or source.attempt == args.attempt)
            and (args.rank is None or source.rank == args.rank)
            and (args.node is None or source.node == args.node))


def _lines(source: LogSource, args: argparse.Namespace,
           pattern: re.Pattern[str] | None) -> Iterable[str]:
    """The lines of one file, those matching ``pattern``, cut for display unless ``--full``."""
    from shoal._storage.log_lines import LineReader
    from shoal._storage.logs import LINE_LIMIT, cut_line

    # A match may lie past the display limit, so --grep reads lines whole and cuts after.
    limit = None if args.full or pattern is not None else LINE_LIMIT
    for line in LineReader(source.path, limit).lines(final=True):
        if pattern is None:
            yield line
        elif pattern.search(line):
            yield line if args.full else cut_line(line)


def _driver_elsewhere(records: Records, run: RunRecord, args: argparse.Namespace,
                      pattern: re.Pattern[str] | None) -> int:
    """A run driven elsewhere (Kubernetes): its driver's own log first, from the cluster;
    how many lines matched."""
    from shoal._storage.logs import cut_line
    from shoal._storage.records import driver_folder

    where = driver_folder(records, run)
    if where is None:
        return 0
    from shoal._driver.remote_control import driver_log

    lines, why = driver_log(run, where)
    if why is not None:
        print(f"shoal: the driver's own log is not readable from here ({why}); the calls' "
              "logs follow", file=sys.stderr)
    lines = [ln for ln in lines if pattern is None or pattern.search(ln)]
    if lines or (pattern is None and why is None):
        sys.stdout.write(f"==> driver of {run.name} on {run.engine} <==\n")
        sys.stdout.writelines(f"{ln if args.full else cut_line(ln)}\n" for ln in lines)
        if not lines:
            sys.stdout.write("(no output, or its pod is gone)\n")
    return len(lines)


def _combined(records: Records, run: str, args: argparse.Namespace,
              pattern: re.Pattern[str] | None, matched: int = 0) -> int:
    from shoal import _contract as contract
    from shoal._storage.logs import log_sources

    tasks = {a.action_id: ("/".join(a.group_path) + " › " if a.group_path else "") + a.task
             for a in records.list_actions(run)}
    by_attempt: dict[tuple[str, int], list[LogSource]] = {}
    for s in log_sources(contract.home(), records, run):
        if _wanted(args, s):
            by_attempt.setdefault((s.action, s.attempt), []).append(s)
    for att in records.list_attempts(run, args.action):
        if args.attempt is not None and att.attempt != args.attempt:
            continue
        header = (f"==> {att.action_id} {tasks.get(att.action_id, '?')} attempt {att.attempt} "
                  f"({att.state}) <==\n")
        printed = 0
        for source in by_attempt.get((att.action_id, att.attempt), []):
            prefix = f"{source.label} " if source.label else ""
            for line in _lines(source, args, pattern):
                if not printed:
                    sys.stdout.write(header)
                printed += 1
                sys.stdout.write(f"{prefix}{line}\n")
        if not printed and pattern is None:
            sys.stdout.write(header + "(no output)\n")
        matched += printed
        sys.stdout.flush()
    return _grep_result(run, pattern, matched)


def _rank_logs(records: Records, run: str, args: argparse.Namespace,
               pattern: re.Pattern[str] | None) -> int:
    """Logs of one rank, every attempt and gang restart, each under its own header."""
    from shoal import _contract as contract
    from shoal._storage.logs import log_sources
    from shoal.errors import NotFoundError

    every = log_sources(contract.home(), records, run)
    sources = [s for s in every if s.kind == "rank" or (s.kind == "stacks" and s.rank is not None)]
    found = [s for s in sources if _wanted(args, s)]
    if not sources:  # Kubernetes: a node is a pod whose ranks all write to its one log
        sources = _ranks_in_node_logs(records, run, every)
        found = [s for s in sources if _wanted(args, s)]
    if not found:
        ranks = sorted({f"rank{s.rank}" for s in sources})
        fix = f"use one of {', '.join(ranks)}" if ranks else "it ran no clustered task"
        raise NotFoundError(f"--rank={args.rank}: run {run} has no log of that rank. Fix: {fix}")
    matched = 0
    for source in found:
        what = {"stacks": " stacks", "node": f" (in node {source.node}'s log)"}
        world = f", world {source.world}" if source.world else ""  # the gang changed size
        header = (f"==> {source.action} attempt {source.attempt} restart {source.restart} "
                  f"rank {source.rank}{what.get(source.kind, '')}{world} <==\n")
        matched += _print_source(header, source, args, pattern)
    sys.stdout.flush()
    return _grep_result(run, pattern, matched)


def _print_source(header: str, source: LogSource, args: argparse.Namespace,
                  pattern: re.Pattern[str] | None) -> int:
    """One file's lines under its header (searched: the header only above a match); how
    many lines were printed."""
    if pattern is None:
        sys.stdout.write(header)
    printed = 0
    for line in _lines(source, args, pattern):
        if pattern is not None and not printed:
            sys.stdout.write(header)
        printed += 1
        sys.stdout.write(line + "\n")
    return printed


def _node_logs(records: Records, run: str, args: argparse.Namespace,
               pattern: re.Pattern[str] | None) -> int:
    """The logs of one node of each gang, every attempt and restart: its ranks', its
    launcher's, then Ray's own (the principal ones printed, the rest listed unless
    searched), each file under its own header."""
    from shoal import _contract as contract
    from shoal._storage.logs import log_sources
    from shoal._storage.ray_clusters import PRINCIPAL_RAY_LOGS
    from shoal.errors import NotFoundError

    every = [s for s in log_sources(contract.home(), records, run, ray=True)
             if s.node is not None]
    found = [s for s in every if _wanted(args, s)]
    if not found:
        nodes = sorted({f"{s.node}" for s in every}, key=int)
        fix = f"use one of {', '.join(nodes)}" if nodes else "it ran no clustered task"
        raise NotFoundError(f"--node={args.node}: run {run} has no log of that node. "
                            f"Fix: {fix}")
    matched = 0
    listed: dict[tuple[str, int, int | None], list[LogSource]] = {}
    for source in found:
        if source.kind == "ray" and pattern is None and source.file not in PRINCIPAL_RAY_LOGS:
            listed.setdefault((source.action, source.attempt, source.restart),
                              []).append(source)
            continue
        world = f", world {source.world}" if source.world else ""
        what = {"rank": f"rank {source.rank}", "stacks": f"rank {source.rank} stacks",
                "node": "launcher", "ray": f"ray {source.file} ({source.path})"}
        header = (f"==> {source.action} attempt {source.attempt} restart {source.restart} "
                  f"node {source.node} {what.get(source.kind, source.kind)}{world} <==\n")
        printed = _print_source(header, source, args, pattern)
        if not printed and pattern is None:
            sys.stdout.write("(no output)\n")
        matched += printed
    for (action, attempt, restart), rest in listed.items():
        sys.stdout.write(f"==> {action} attempt {attempt} restart {restart} node {args.node}: "
                         f"Ray's other logs, in {rest[0].path.parent} <==\n")
        for source in rest:
            sys.stdout.write(f"{source.file}  {_size(source.path)}\n")
    sys.stdout.flush()
    return _grep_result(run, pattern, matched)


def _size(path: Path) -> str:
    try:
        size = path.stat().st_size
    except OSError:
        return "?"
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB"


def _ranks_in_node_logs(records: Records, run: str, every: list[LogSource]) -> list[LogSource]:
    """One source per rank of each node log, the node's file: where a gang's ranks log to
    their node's stdout (Kubernetes pods), that is a rank's log."""
    import dataclasses

    from shoal._storage.gang_starts import gang_starts
    from shoal._storage.logs import ranks_per_node

    # each start's own ranks per node, else the call's (a start whose event is not there yet)
    per_node = ranks_per_node(gang_starts(records.events(run), records.list_attempts(run)))
    out = []
    for s in every:
        nproc = s.per_node or per_node.get(s.action)
        if s.kind == "node" and s.node is not None and nproc:
            out += [dataclasses.replace(s, rank=r)
                    for r in range(s.node * nproc, (s.node + 1) * nproc)]
    return out


def _grep_result(run: str, pattern: re.Pattern[str] | None, matched: int) -> int:
    """As grep: 1 when no line matched."""
    if pattern is not None and not matched:
        print(f"shoal: no line of run {run} matches {pattern.pattern!r}", file=sys.stderr)
        return 1
    return 0


def _follow(records: Records, run: str, args: argparse.Namespace,
            pattern: re.Pattern[str] | None) -> int:
    from shoal import _contract as contract
    from shoal._storage.log_lines import LogFollower
    from shoal._storage.logs import LINE_LIMIT, cut_line
    from shoal._storage.records import refresh

    follower = LogFollower(contract.home(), records, run, keep=lambda s: _wanted(args, s),
                           limit=None if args.full or pattern is not None else LINE_LIMIT)
    reaped_at = time.monotonic()
    while True:
        # The state is read before the files: once it is terminal, every line is written.
        ended = records.get_run(run).terminal
        for source, line in follower.poll(final=ended):
            if pattern is not None:
                if not pattern.search(line):
                    continue
                line = line if args.full else cut_line(line)
            sys.stdout.write(f"{source.tag} {line}\n")
        sys.stdout.flush()
        if ended:
            return 0
        if time.monotonic() - reaped_at > REAP_EVERY:  # a killed driver never ends its run
            records.reap_dead_runs()
            refresh(records, records.get_run(run), home=contract.home(), logs=True)
            reaped_at = time.monotonic()
        time.sleep(POLL)
