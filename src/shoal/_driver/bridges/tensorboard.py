"""The TensorBoard bridge: event files written with tensorboardX, one folder per rank.

``DIR/<run>/<action>.<attempt>/rank<N>`` (a plain call: ``.../task``), so ``tensorboard
--logdir DIR`` shows every rank of every run as its own line; each point is a scalar with its
step and the wall time it was logged at, the system metrics (``system/...``) beside the user's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shoal._driver.bridges.follower import Bridge, Point, Stream


class TensorBoardBridge(Bridge):
    name = "tensorboard"

    def __init__(self, folder: str, run: str) -> None:
        self.root = Path(folder) / run
        self._writers: dict[Stream, Any] = {}
        self._writer_class: Any = None

    def open(self) -> None:
        from tensorboardX import SummaryWriter

        self._writer_class = SummaryWriter

    def write(self, stream: Stream, points: Sequence[Point]) -> None:
        writer = self._writers.get(stream)
        if writer is None:
            # tensorboardX's own thread writes the queued events and flushes the file every
            # flush_secs (its flush() does not wait for the queue): 1 s keeps a point within
            # ~2.5 s of being logged (0.5 s writer + 1 s poll + 1 s here).
            writer = self._writers[stream] = self._writer_class(
                logdir=str(self.root / stream.folder), flush_secs=1)
        for name, step, at, value in points:
            writer.add_scalar(name, value, step, walltime=at)

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
