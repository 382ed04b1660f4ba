"""Where a run's logs are, and reading them in whole lines while they grow.

A plain call writes one file, the attempt's ``log_path`` in the records. A gang writes, per
attempt and gang restart, ``runs/<run>/logs/gang/<action>.<attempt>/r<restart>/``: one
``node<i>.log`` per node launcher and one ``rank<N>.log`` per rank, and after a hang diagnosis
``stacks-rank<N>.txt`` per rank and ``hang.txt`` (the verdict and every rank; kind "stacks",
shown after the logs they explain), and for a Ray call, once a node's raylet has ended, Ray's own
session logs of node ``i`` in ``ray-node<i>/`` (kind "ray", after that node's launcher log;
listed only when asked, `log_sources(ray=True)`: dozens of files a merged stream would bury
the task's lines under). Each file is a `LogSource`;
`log_sources` lists those of a run, `read_chunk` reads one from an offset on. The CLI's
``shoal logs`` and the web UI both read through these, so a label means the same in both.

The node of a rank is ``rank // nproc_per_node``. The local engine puts ``nnodes`` and
``nproc_per_node`` into the data of each ``gang_started`` event; that is the topology of that
start (`shoal._storage.gang_starts`), so it is exact even while rank files are still
appearing. Runs whose events lack it (recorded before) fall back to counting node launcher
logs: the engine creates each before its node's ranks start, so the count is right once the
gang has started.

An elastic gang's starts differ in size: rank 1 of a 2-node start and rank 1 of the 1-node
start after it are different processes in different worlds. Where a gang's node count changed
between starts, each of its labels names its start's world (``world 1×2``: nodes × ranks per
node); a fixed gang's labels stay as they were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shoal._storage.gang_starts import GangStart, gang_starts, size_changed
from shoal._storage.ray_clusters import RAY_LOG_DIR, ray_log_files

if TYPE_CHECKING:
    from shoal._storage.records import Records

__all__ = ["LINE_LIMIT", "LogSource", "cut_line", "gang_log_root", "log_sources", "read_chunk"]

# Longest line the terminal and the UI show whole; the file on disk keeps every byte.
LINE_LIMIT = 16 * 1024

_RESTART_DIR = re.compile(r"r(\d+)")
_RANK_FILE = re.compile(r"rank(\d+)\.log")
_NODE_FILE = re.compile(r"node(\d+)\.log")
_STACKS_FILE = re.compile(r"stacks-rank(\d+)\.txt")
HANG_FILE = "hang.txt"


@dataclass(frozen=True)
class LogSource:
    """One log file of a run: a plain call's, a rank's or a gang node launcher's."""

    action: str
    attempt: int
    task: str
    restart: int | None  # None for a plain call
    node: int | None
    rank: int | None
    # "task" (a plain call), "rank", "node" (a gang's node launcher), "stacks" (a rank's
    # stacks from a hang diagnosis; rank None: the whole diagnosis, hang.txt), "ray" (one of
    # Ray's session logs of a node, ``file`` its name)
    kind: str
    path: Path
    # ranks per node of this start, where its gang_started event said
    per_node: int | None = None
    # "1×2" (nodes × ranks per node of this start) where the gang's size changed between
    # starts, so a label tells which world a line came from; "" otherwise
    world: str = ""
    file: str = ""  # a "ray" source's file name (``raylet.out``)

    @property
    def label(self) -> str:
        """``[node 1 rank 3 attempt 0]`` (``restart 2`` added after a gang restart, ``, world
        1×2`` where the gang's size changed); ``""`` for a plain call, whose lines need no
        prefix in its own section."""
        if self.kind == "task":
            return ""
        again = f" restart {self.restart}" if self.restart else ""
        again += f", world {self.world}" if self.world else ""
        if self.kind == "stacks":
            who = "hang diagnosis" if self.rank is None else f"node {self.node} rank {self.rank}"
            return f"[{who} stacks attempt {self.attempt}{again}]"
        if self.kind == "ray":
            return f"[node {self.node} ray {self.file} attempt {self.attempt}{again}]"
        who = f"node {self.node}" + (f" rank {self.rank}" if self.kind == "rank" else " launcher")
        return f"[{who} attempt {self.attempt}{again}]"

    @property
    def tag(self) -> str:
        """The prefix of a line in a stream that mixes actions (``shoal logs --follow``)."""
        return f"{self.action} {self.label or f'[attempt {self.attempt}]'}"


def gang_log_root(home: Path, run: str) -> Path:
    return home / "runs" / run / "logs" / "gang"


def log_sources(home: Path, records: Records, run: str, *, ray: bool = False) -> list[LogSource]:
    """Every log file of ``run``, in the order its attempts started, then by gang restart,
    node and rank (each node's launcher after its ranks: it reports how they ended; with
    ``ray``, a Ray node's session logs after its launcher's).

    A plain call's file is listed from the moment its attempt starts, before it exists; a
    gang's files once they exist (a follower re-lists to find new ones).
    """
    tasks = {a.action_id: a.task for a in records.list_actions(run)}
    attempts = records.list_attempts(run)
    starts = gang_starts(records.events(run), attempts)
    changed = {action for action in {k[0] for k in starts}
               if size_changed([s for k, v in starts.items() if k[0] == action for s in v])}
    per_node = ranks_per_node(starts)
    root = gang_log_root(home, run)
    out: list[LogSource] = []
    for att in attempts:
        task = tasks.get(att.action_id, "?")
        gang_dir = root / f"{att.action_id}.{att.attempt}"
        if gang_dir.is_dir():
            mine = {s.restart: s for s in starts.get((att.action_id, att.attempt), ())}
            out += _gang_sources(gang_dir, att.action_id, att.attempt, task,
                                 per_node.get(att.action_id), mine,
                                 att.action_id in changed, ray)
        elif att.log_path:
            out.append(LogSource(action=att.action_id, attempt=att.attempt, task=task,
                                 restart=None, node=None, rank=None, kind="task",
                                 path=Path(att.log_path)))
    return out


def ranks_per_node(starts: dict[tuple[str, int], list[GangStart]]) -> dict[str, int]:
    """action -> nproc_per_node of its last start that says it: for a start whose own
    event is not recorded (yet)."""
    found: dict[str, int] = {}
    for (action, _), of_attempt in sorted(starts.items()):
        for s in of_attempt:
            if s.nproc_per_node is not None and s.nproc_per_node > 0:
                found[action] = s.nproc_per_node
    return found


def _gang_sources(gang_dir: Path, action: str, attempt: int, task: str,
                  per_node: int | None, starts: dict[int, GangStart],
                  changed: bool, ray: bool = False) -> list[LogSource]:
    restarts = sorted((int(m.group(1)), d) for d in gang_dir.iterdir()
                      if d.is_dir() and (m := _RESTART_DIR.fullmatch(d.name)))
    out: list[LogSource] = []
    for restart, folder in restarts:
        nodes: list[tuple[int, Path]] = []
        ranks: list[tuple[int, Path]] = []
        stacks: list[tuple[int, Path]] = []
        ray_dirs: list[tuple[int, Path]] = []
        for f in folder.iterdir():
            if m := RAY_LOG_DIR.fullmatch(f.name):
                if ray and f.is_dir():
                    ray_dirs.append((int(m.group(1)), f))
            elif m := _NODE_FILE.fullmatch(f.name):
                nodes.append((int(m.group(1)), f))
            elif m := _RANK_FILE.fullmatch(f.name):
                ranks.append((int(m.group(1)), f))
            elif m := _STACKS_FILE.fullmatch(f.name):
                stacks.append((int(m.group(1)), f))
        start = starts.get(restart)
        known = start.nproc_per_node if start is not None else None
        nproc = known if known is not None and known > 0 else per_node
        if nproc is None:  # a run recorded before the events carried it
            nproc = -(-(max((r for r, _ in ranks), default=0) + 1) // max(len(nodes), 1))
        # (a start whose event is not recorded yet has no world to name: its label says
        # none until the event is there)
        world = start.world if changed and start is not None else ""
        rows = [(n, 1, n, 0, LogSource(action=action, attempt=attempt, task=task,
                                        restart=restart, node=n, rank=None, kind="node",
                                        path=p, per_node=known, world=world))
                for n, p in nodes]
        rows += [(r // nproc, 0, r, kind, LogSource(action=action, attempt=attempt, task=task,
                                                     restart=restart, node=r // nproc, rank=r,
                                                     kind=("rank", "stacks")[kind], path=p,
                                                     per_node=known, world=world))
                 for kind, files in enumerate((ranks, stacks)) for r, p in files]
        # (after the node's launcher log: node, then 2, then the file's place in its folder)
        rows += [(n, 2, i, 0, LogSource(action=action, attempt=attempt, task=task,
                                        restart=restart, node=n, rank=None, kind="ray",
                                        path=p, per_node=known, world=world, file=p.name))
                 for n, d in ray_dirs for i, p in enumerate(ray_log_files(d))]
        if (folder / HANG_FILE).exists():
            rows.append((1 << 30, 0, 0, 0, LogSource(
                action=action, attempt=attempt, task=task, restart=restart, node=None,
                rank=None, kind="stacks", path=folder / HANG_FILE, per_node=known,
                world=world)))
        out += [s for *_, s in sorted(rows, key=lambda row: row[:4])]
    return out


def read_chunk(path: Path, offset: int, max_bytes: int = 1 << 20, *,
               final: bool = False) -> tuple[bytes, int]:
    """Up to ``max_bytes`` of ``path`` from ``offset``, cut after its last newline, and the
    offset to read from next. A file not (yet) there reads as empty.

    Two exceptions to whole lines, so a reader always gets on: a line longer than
    ``max_bytes`` comes in pieces of ``max_bytes`` (a piece is the only chunk that does not
    end in a newline), and with ``final`` (the writer is gone) a last line without its newline
    comes as it is.
    """
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return b"", offset
    end = data.rfind(b"\n") + 1
    at_eof = len(data) < max_bytes
    if (final and at_eof) or (end == 0 and not at_eof):
        end = len(data)
    return data[:end], offset + end


def cut_line(line: str, limit: int = LINE_LIMIT) -> str:
    """``line`` if its UTF-8 form fits in ``limit`` bytes; else its first ``limit`` bytes and
    a marker saying how many were cut (the file on disk keeps them)."""
    raw = line.encode("utf-8", "replace")
    if len(raw) <= limit:
        return line
    head = raw[:limit].decode("utf-8", "ignore")
    return head + cut_marker(len(raw) - len(head.encode("utf-8")))


def cut_marker(cut: int) -> str:
    return f" ...[{cut} bytes cut; `shoal logs --full` prints the whole line]"
