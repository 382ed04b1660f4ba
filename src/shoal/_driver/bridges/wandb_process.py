"""The child process of the W&B bridge: JSON lines in on stdin, W&B runs out.

Line 1: ``{"open": {"run", "dir", "project"}}``; then ``{"stream": {"action", "attempt",
"rank"}, "points": [[name, step, time, value], ...]}``; EOF: every run is finished.
Each metric gets a step metric of its own kind (`define_metric`): user metrics are plotted
against their ``log_metrics`` step (``shoal/step``), system metrics against the sample index
(``shoal/sample``), so the two never fight over W&B's single increasing ``_step``. W&B records
the time a point reaches it, not the time it was logged (``log`` takes no wall time).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

USER_STEP = "shoal/step"
SYSTEM_STEP = "shoal/sample"


class Runs:
    def __init__(self, run: str, folder: str, project: str) -> None:
        import wandb

        self.wandb = wandb
        self.run, self.folder, self.project = run, folder, project
        self._runs: dict[tuple[str, int, int | None], Any] = {}
        self._defined: dict[tuple[str, int, int | None], set[str]] = {}

    def _open(self, key: tuple[str, int, int | None]) -> Any:
        action, attempt, rank = key
        run = self.wandb.init(
            project=self.project, group=self.run, job_type=f"{action}.{attempt}",
            name="task" if rank is None else f"rank{rank}", dir=self.folder,
            config={"shoal_run": self.run, "action": action, "attempt": attempt,
                    "rank": rank},
            reinit="create_new",
            # Shoal's own system metrics are forwarded per rank; wandb's would measure this
            # bridge process, and its console capture would record nothing of the ranks.
            settings=self.wandb.Settings(console="off", x_disable_stats=True))
        self._runs[key] = run
        self._defined[key] = set()
        return run

    def write(self, stream: dict[str, Any], points: list[list[Any]]) -> None:
        key = (str(stream["action"]), int(stream["attempt"]), stream["rank"])
        run = self._runs.get(key) or self._open(key)
        log_points(run, self._defined[key], points)

    def finish(self) -> None:
        for run in self._runs.values():
            run.finish()


def log_points(run: Any, defined: set[str], points: Sequence[Sequence[Any]]) -> None:
    """Log Shoal metric points (name, step, time, value) to the W&B ``run``: one ``log`` per
    step, each metric against its step metric (``defined``: the names already declared).
    The bridge's runs and a task's own ``@wandb_init`` run (`shoal._plugins.wandb`) both
    log this way, so a metric looks the same in W&B whichever sent it."""
    rows: dict[tuple[str, int], dict[str, float]] = {}
    for name, step, _at, value in points:
        axis = SYSTEM_STEP if name.startswith("system/") else USER_STEP
        if axis not in defined:
            run.define_metric(axis)
            defined.add(axis)
        if name not in defined:
            run.define_metric(name, step_metric=axis)
            defined.add(name)
        rows.setdefault((axis, int(step)), {})[name] = value
    for (axis, step), values in rows.items():
        run.log({**values, axis: step})


def main() -> None:
    runs: Runs | None = None
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        if "open" in message:
            o = message["open"]
            runs = Runs(o["run"], o["dir"], o["project"])
        elif runs is not None:
            runs.write(message["stream"], message["points"])
    if runs is not None:
        runs.finish()


if __name__ == "__main__":
    main()
