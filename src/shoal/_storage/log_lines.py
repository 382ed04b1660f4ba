"""A run's logs as lines: one file read on as it grows (`LineReader`), and every file of a run
followed at once, new files included (`LogFollower`).

Lines come as text without their newline. A line longer than the limit is cut for display
(`cut_line`'s marker says how many bytes); only its first bytes are held in memory however long
it is on disk, so a 5 MB line costs a reader the limit, not 5 MB. With ``limit=None`` lines come
whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from shoal._storage.logs import LINE_LIMIT, LogSource, cut_marker, log_sources, read_chunk

if TYPE_CHECKING:
    from shoal._storage.records import Records

__all__ = ["LineReader", "LogFollower"]

CHUNK = 1 << 20
# How often a follower lists the run's files again to find new ones (a child call starting,
# a restarted gang's ranks); reading the files it knows is cheaper and done on every poll.
RELIST_EVERY = 1.0


class LineReader:
    """The lines of one file from its start, each read once, however often `lines` is called."""

    def __init__(self, path: Path, limit: int | None = LINE_LIMIT) -> None:
        self.path = path
        self.limit = limit
        self.offset = 0
        self._pending = bytearray()  # the start of a line whose newline has not come yet
        self._dropped = 0  # bytes of that line past the limit, not kept

    def lines(self, *, final: bool = False) -> Iterator[str]:
        """The lines written since the last call. With ``final`` (the writer is done) a last
        line without its newline comes too."""
        while True:
            data, self.offset = read_chunk(self.path, self.offset, CHUNK, final=final)
            if not data:
                break
            *whole, rest = data.split(b"\n")
            for part in whole:
                self._keep(part)
                yield self._take()
            self._keep(rest)
        if final and (self._pending or self._dropped):
            yield self._take()

    def _keep(self, part: bytes) -> None:
        room = len(part) if self.limit is None else max(self.limit + 4 - len(self._pending), 0)
        self._pending += part[:room]
        self._dropped += len(part) - min(room, len(part))

    def _take(self) -> str:
        raw, dropped = bytes(self._pending), self._dropped
        self._pending.clear()
        self._dropped = 0
        if self.limit is None or len(raw) + dropped <= self.limit:
            return raw.decode("utf-8", "replace")
        head = raw[:self.limit].decode("utf-8", "ignore")
        return head + cut_marker(len(raw) + dropped - len(head.encode("utf-8")))


class LogFollower:
    """Every log file of a run that ``keep`` accepts, read on as the run writes them."""

    def __init__(self, home: Path, records: Records, run: str, *,
                 keep: Callable[[LogSource], bool] = lambda s: True,
                 limit: int | None = LINE_LIMIT) -> None:
        self.home, self.records, self.run = home, records, run
        self.keep = keep
        self.limit = limit
        self.sources: list[LogSource] = []
        self._readers: dict[Path, LineReader] = {}
        self._listed_at = float("-inf")

    def poll(self, *, final: bool = False) -> Iterator[tuple[LogSource, str]]:
        """The lines written since the last poll, file by file in `log_sources` order."""
        if final or time.monotonic() - self._listed_at >= RELIST_EVERY:
            self.sources = [s for s in log_sources(self.home, self.records, self.run)
                            if self.keep(s)]
            self._listed_at = time.monotonic()
        for source in self.sources:
            reader = self._readers.get(source.path)
            if reader is None:
                reader = self._readers[source.path] = LineReader(source.path, self.limit)
            for line in reader.lines(final=final):
                yield source, line
