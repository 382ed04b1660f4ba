"""The log lines of running calls as `shoal run` streams them, each traceback once.

Every rank of a gang that fails the same way prints the same traceback, and so does every
attempt of a task that fails the same way again, and every call of a fan-out: eight identical
tracebacks bury the one line that differs. A traceback whose frames were already streamed is
folded into its last line, the exception, which says where the frames are; the log files keep
every line (`shoal logs`).
"""

from __future__ import annotations

from typing import TextIO

from shoal._storage.logs import cut_line

TRACEBACK_HEADER = "Traceback (most recent call last):"


class LogStream:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.pending: dict[str, list[str]] = {}  # source -> the traceback it is printing
        self.shown_by: dict[str, str] = {}  # a traceback's frames -> the label that showed them

    def lines(self, source: str, label: str, lines: list[str]) -> None:
        """Lines that ``label`` printed (``source``: its log file)."""
        for line in lines:
            block = self.pending.get(source)
            if block is None:
                if line == TRACEBACK_HEADER:
                    self.pending[source] = [line]
                else:
                    self._print(label, line)
                continue
            block.append(line)
            if not line[:1].isspace():  # the exception's line, after the indented frames
                del self.pending[source]
                self._traceback(label, block)

    def close(self, source: str, label: str) -> None:
        """The source ended: what it left of a traceback is printed as it is."""
        for line in self.pending.pop(source, []):
            self._print(label, line)

    def _traceback(self, label: str, block: list[str]) -> None:
        frames = "\n".join(block[:-1])
        first = self.shown_by.get(frames)
        if first is None:
            self.shown_by[frames] = label
            for line in block:
                self._print(label, line)
            return
        where = "" if first == label else f" [{first}]"
        self._print(label, f"{block[-1]} (the same traceback as{where} above)")

    def _print(self, label: str, line: str) -> None:
        print(f"  [{label}] {cut_line(line)}", file=self.out, flush=True)
