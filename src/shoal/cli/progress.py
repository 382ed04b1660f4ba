"""Live progress of a run in the terminal: action events and the lines tasks print.

Tasks with many calls (a fan-out of hundreds) would drown the screen, so each task prints its
first few calls in full and then only a count; the summary at the end has every figure.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TextIO

from shoal.cli.log_stream import TRACEBACK_HEADER, LogStream
from shoal.errors import TaskFailed

SHOWN_PER_TASK = 5
TAIL_SECONDS = 0.2


class Progress:
    def __init__(self, out: TextIO | None = None, *, stream_logs: bool = True) -> None:
        self.out = out or sys.stderr
        self.stream_logs = stream_logs
        self.t0 = time.monotonic()
        self.counts: dict[str, Counter[str]] = defaultdict(Counter)
        self.seconds: dict[str, float] = defaultdict(float)
        self.shown: Counter[str] = Counter()
        self.tails: dict[str, tuple[str, Path, int]] = {}  # action -> (label, log, offset)
        self.groups: dict[str, str] = {}  # action -> "epoch-1/shard-3 › " for calls in a group
        self.streamed: set[str] = set()  # actions whose log lines were printed as they came
        self.stream = LogStream(self.out)

    def _print(self, text: str) -> None:
        print(f"{time.monotonic() - self.t0:7.2f}s {text}", file=self.out, flush=True)

    def _visible(self, task: str, action: str) -> bool:
        return action == "a0" or self.shown[task] <= SHOWN_PER_TASK

    def __call__(self, kind: str, action: str, data: dict[str, Any]) -> None:
        task = data.get("task", "?")
        self.counts[task][kind] += 1
        if data.get("group"):
            self.groups[action] = "/".join(data["group"]) + " › "
        where = self.groups.get(action, "")
        if kind == "traced":
            self._traced(task, action, where, data)
            return
        if kind == "started" and data.get("attempt", 0) == 0:
            self.shown[task] += 1
            if self.shown[task] == SHOWN_PER_TASK + 1 and action != "a0":
                self._print(f"  … more calls of {task}: counted in the summary")
        visible = self._visible(task, action)
        if kind == "started":
            if visible:
                attempt = data.get("attempt", 0)
                extra = f" (attempt {attempt})" if attempt else ""
                self._print(f"▶ {where}{task} [{action}]{extra}")
                self.tails[action] = (f"{where}{task} {action}", Path(data["log"]), 0)
                if self.stream_logs:
                    self.streamed.add(action)
        elif kind == "succeeded":
            self.seconds[task] += data.get("seconds", 0.0)
            self._flush(action)
            if visible:
                self._print(f"✓ {where}{task} [{action}] {data.get('seconds', 0.0):.2f}s")
        elif kind == "cached":
            self._print(f"● {task} [{action}] cache hit: outputs reused from run "
                        f"{data.get('from_run')}, not executed")
        elif kind == "replayed":
            what = "trace " if data.get("trace") else ""
            earlier = data.get("where") or f"run {data.get('from_run')}"
            self._print(f"↺ {where}{what}{task} [{action}] completed in {earlier}: "
                        "replayed, not run again")
        elif kind == "retry":
            self._flush(action)
            self._print(f"↻ {task} [{action}] attempt {data['attempt']} failed: "
                        f"{data['message']}; retrying in {data['delay']:.1f}s")
        elif kind == "gang_started":
            self._flush_gang(action)
            for label, log in data["logs"].items():
                self.tails[f"{action}|{label}"] = (label, Path(log), 0)
            if self.stream_logs:
                self.streamed.add(action)
            self._print(f"⇶ {task} [{action}] {data['message']}")
        elif kind == "ray_cluster":
            self._print(f"◎ {task} [{action}] {data['message']}")
        elif kind == "gang_hang":
            self._flush_gang(action)
            self._print(f"⧗ {task} [{action}] {data['message']}")
        elif kind in ("gang_restart", "gang_preempted", "gang_resized"):
            self._flush_gang(action)
            self._print(f"↻ {task} [{action}] {data['message']}")
        elif kind in ("failed", "cancelled"):
            self._flush(action)
            self._print(f"✗ {where}{task} [{action}] {kind}: {data.get('message', '')}")

    def _traced(self, task: str, action: str, where: str, data: dict[str, Any]) -> None:
        """A `@shoal.trace` call ended; the first few of each function are shown."""
        self.shown[task] += 1
        self.seconds[task] += data.get("seconds", 0.0)
        if data.get("stopped"):  # a traced generator left before its end
            self._print(f"◦ {where}trace {task} [{action}] {data['error']}")
            return
        if data.get("error"):
            self.counts[task]["failed"] += 1
            self._print(f"✗ {where}trace {task} [{action}] failed: {data['error']}")
            return
        self.counts[task]["traced_ok"] += 1
        if self.shown[task] <= SHOWN_PER_TASK:
            self._print(f"· {where}trace {task} [{action}] {data.get('seconds', 0.0):.2f}s")
        elif self.shown[task] == SHOWN_PER_TASK + 1:
            self._print(f"  … more calls of trace {task}: counted in the summary")
    def _flush(self, action: str) -> None:
        entry = self.tails.pop(action, None)
        if entry is not None:
            self._emit(action, entry, final=True)
        self._flush_gang(action)

    def _flush_gang(self, action: str) -> None:
        for key in [k for k in self.tails if k.startswith(f"{action}|")]:
            self._emit(key, self.tails.pop(key), final=True)

    def _emit(self, action: str, entry: tuple[str, Path, int],
              final: bool = False) -> tuple[str, Path, int]:
        label, path, offset = entry
        if not self.stream_logs:
            return entry
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return entry
        end = data.rfind(b"\n") + 1
        self.stream.lines(str(path), label, data[:end].decode("utf-8", "replace").splitlines())
        if final:
            self.stream.close(str(path), label)
        return (label, path, offset + end)

    async def follow(self) -> None:
        """Print new log lines of running actions until cancelled."""
        while True:
            await asyncio.sleep(TAIL_SECONDS)
            for action, entry in list(self.tails.items()):
                if action in self.tails:
                    self.tails[action] = self._emit(action, entry)

    def failure_details(self, error: TaskFailed) -> str:
        """What the report of a failed run adds to the screen: the traceback and the last log
        lines of the call where the failure began, unless that call's log was streamed above
        (the traceback it printed is there already). What the engine wrote itself, such as a
        hang's stacks, was in no log: it is shown whatever was streamed."""
        info = error.info
        if (info.origin_action or info.action) not in self.streamed:
            return error.details()
        printed = info.traceback.startswith(TRACEBACK_HEADER)
        return "" if printed else info.traceback.rstrip()

    def summary(self) -> str:
        rows = [("task", "calls", "ok", "cached", "replayed", "failed", "retries", "task time")]
        for task, c in self.counts.items():
            calls = c["started"] - c["retry"] + c["cached"] + c["replayed"] + c["traced"]
            rows.append((task, str(calls), str(c["succeeded"] + c["traced_ok"]), str(c["cached"]),
                         str(c["replayed"]), str(c["failed"]), str(c["retry"]),
                         f"{self.seconds[task]:.2f}s"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True))
                         for r in rows)
