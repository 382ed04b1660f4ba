"""`shoal.log_metrics`: numbers a task reports, from any rank, kept with the run.

The shape of MLflow's ``log_metrics(metrics, step=None)``. Each point keeps the run, action,
attempt, gang restart, node, rank, step, name, value and wall time (the file's header carries
what is the same for every point). A call costs a few microseconds: the values are checked,
then appended to a buffer that a background thread writes out (`shoal._runtime.observe.metrics`).
``step=None`` takes the step after the last one this process logged (0 first), so a loop that
never passes a step still gets an x axis. NaN and infinities are kept (readers flag them).
"""

from __future__ import annotations

import numbers
import time
import warnings
from collections.abc import Mapping
from typing import Any

from shoal._runtime.observe import metrics as _metrics
from shoal.errors import SpecError

_warned_outside = False


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Record ``{name: number}`` at ``step`` for the running task (this rank of it).

    Callable from sync and async code and from any thread of the task. Outside a task it
    warns once and stores nothing.
    """
    at = time.time()
    if not isinstance(metrics, Mapping):
        raise SpecError("log_metrics(metrics)", metrics, "must be a dict of name to number",
                        "pass e.g. {'loss': loss.item(), 'lr': lr}")
    if step is not None and (not isinstance(step, numbers.Integral) or isinstance(step, bool)):
        raise SpecError("log_metrics(step)", step, "must be an int or None",
                        "pass the training step as an int, e.g. step=it")
    points = []
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise SpecError("log_metrics(metrics) name", name, "must be a non-empty str",
                            "use names like 'loss' or 'train/loss'")
        points.append((name, _number(name, value)))
    writer = _metrics.current()
    if writer is None:
        _warn_outside()
        return
    writer.add(points, None if step is None else int(step), at)


def _number(name: str, value: Any) -> float:
    if isinstance(value, float):
        return value
    if isinstance(value, numbers.Real):  # int, bool, numpy scalars
        return float(value)
    if not isinstance(value, (str, bytes)) and hasattr(value, "__float__"):
        try:  # a 0-d tensor or array; a bigger one raises and is reported below
            return float(value)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise SpecError(f"log_metrics(metrics)[{name!r}]", value, "must be a number (int or float)",
                    "log a number: e.g. loss.item() for a tensor, float(x) for a numpy value")


def _warn_outside() -> None:
    global _warned_outside
    if not _warned_outside:
        _warned_outside = True
        warnings.warn("shoal.log_metrics called outside a task: nothing is stored "
                      "(metrics are kept for task calls of a run)", RuntimeWarning, stacklevel=3)
