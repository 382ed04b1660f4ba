"""A run's logs in the browser: the sources, a live tail as server-sent events, the download.

The tail starts at most `START_BYTES` before the end (a week-long log is not sent whole; the
download is), then sends each whole line as it lands, polling the file every `POLL_SECONDS`.
A line longer than `VIEW_CHARS` is cut in the view and says so; the file and its download keep
it whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.requests import Request

from shoal._storage.logs import LogSource, log_sources, read_chunk
from shoal._storage.records import Records

START_BYTES = 1 << 20
VIEW_CHARS = 4000
CHUNK_BYTES = 256 * 1024
POLL_SECONDS = 0.2
KEEPALIVE_SECONDS = 15.0


def source_key(s: LogSource) -> str:
    """A stable name for a source in URLs: ``a0.0.r1.rank3``, ``a0.0.r0.node1``, ``a1.0.task``,
    ``a0.0.r0.stacks3`` (a rank's stacks from a hang diagnosis), ``a0.0.r0.stacksall``,
    ``a0.0.r0.ray1.raylet.out`` (one of Ray's session logs of node 1)."""
    if s.kind == "task":
        return f"{s.action}.{s.attempt}.task"
    if s.kind == "ray":
        return f"{s.action}.{s.attempt}.r{s.restart}.ray{s.node}.{s.file}"
    if s.kind == "stacks":
        number: object = "all" if s.rank is None else s.rank
    else:
        number = s.rank if s.kind == "rank" else s.node
    return f"{s.action}.{s.attempt}.r{s.restart}.{s.kind}{number}"


def sources_json(home: Path, records: Records, run: str) -> list[dict[str, Any]]:
    out = []
    for s in log_sources(home, records, run, ray=True):
        try:
            size = s.path.stat().st_size
        except OSError:
            size = 0
        out.append({"key": source_key(s), "action": s.action, "attempt": s.attempt,
                    "task": s.task, "restart": s.restart, "node": s.node, "rank": s.rank,
                    "kind": s.kind, "label": s.label, "title": _title(s), "size": size,
                    "world": s.world, "file": s.file})
    return out


def _title(s: LogSource) -> str:
    """How the source picker names a log: task, action, then who and which start."""
    if s.kind == "task":
        return f"{s.task} {s.action} attempt {s.attempt}"
    if s.kind == "stacks":
        who = "hang diagnosis" if s.rank is None else f"rank {s.rank} stacks"
    elif s.kind == "ray":
        who = f"Ray {s.file}"
    else:
        who = f"rank {s.rank}" if s.kind == "rank" else "launcher"
    world = f", world {s.world}" if s.world else ""  # an elastic gang that changed size
    return (f"{s.task} {s.action} node {s.node} {who} attempt {s.attempt} "
            f"restart {s.restart}{world}")


def find_source(home: Path, records: Records, run: str, key: str) -> LogSource | None:
    return next((s for s in log_sources(home, records, run, ray=True) if source_key(s) == key),
                None)


def cut_line(line: str, hidden: int = 0) -> str:
    """``line`` (of which ``hidden`` more characters were not even kept) cut to VIEW_CHARS."""
    total = len(line) + hidden
    if total <= VIEW_CHARS:
        return line
    return (f"{line[:VIEW_CHARS]} … [cut: {total - VIEW_CHARS} more characters here; the "
            "file and its download keep the whole line]")


def _start_offset(path: Path) -> tuple[int, bool]:
    """Where the tail starts: the first whole line of the last START_BYTES (True: skipped)."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0, False
    if size <= START_BYTES:
        return 0, False
    with path.open("rb") as f:
        f.seek(size - START_BYTES)
        head = f.read(START_BYTES)
    newline = head.find(b"\n")
    return size - START_BYTES + newline + 1, True


async def tail_events(request: Request, path: Path, follow: bool) -> AsyncIterator[str]:
    """Server-sent events: ``lines`` (a JSON list of lines), ``skipped`` (bytes not sent),
    ``end`` when not following and the file is read."""
    offset, skipped = _start_offset(path)
    if skipped:
        yield f"event: skipped\ndata: {offset}\n\n"
    idle = 0.0
    piece, hidden = "", 0  # the start of a line longer than one read, and what is beyond it
    while True:
        data, offset = await asyncio.to_thread(read_chunk, path, offset, CHUNK_BYTES)
        if data:
            idle = 0.0
            text = data.decode("utf-8", "replace")
            if not text.endswith("\n"):  # a piece of a line longer than one read
                keep = max(0, VIEW_CHARS - len(piece))
                piece += text[:keep]
                hidden += len(text) - len(text[:keep])
                continue
            lines = text[:-1].split("\n")
            lines[0] = piece + lines[0]
            out = [cut_line(lines[0], hidden)] + [cut_line(t) for t in lines[1:]]
            piece, hidden = "", 0
            yield f"event: lines\ndata: {json.dumps(out)}\n\n"
            continue
        if not follow:
            yield "event: end\ndata: {}\n\n"
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_SECONDS)
        idle += POLL_SECONDS
        if idle >= KEEPALIVE_SECONDS:  # a comment line: proxies keep the stream open
            idle = 0.0
            yield ": keepalive\n\n"
