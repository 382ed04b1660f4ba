"""Flyte 2's task settings as values: `RetryStrategy`, `Backoff` and `Timeout`.

``retries=3`` and ``timeout=600`` stay the short forms; these say more. What they hold is
checked here, when the task is defined, and handed to the spec as plain seconds.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass
from typing import NamedTuple

from shoal._spec.call import BackoffSpec
from shoal.errors import SpecError


def seconds(field: str, value: object, *, allow_zero: bool = True) -> float | None:
    """``value`` (int/float seconds or a timedelta) as seconds; None and 0 mean "no bound"."""
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) \
            or value < 0 or (value == 0 and not allow_zero):
        raise SpecError(field, value, "must be a number of seconds >= 0 or a timedelta",
                        "e.g. 600 or timedelta(minutes=10)")
    return float(value) if value else None


@dataclass(frozen=True)
class Backoff:
    """The pause before the n-th retry (0-based): ``min(base * factor**n, cap)``.

    ``factor=1`` keeps the pause at ``base``; a factor above 1 needs a ``cap``.
    """

    base: _dt.timedelta | float
    factor: float = 1.0
    cap: _dt.timedelta | float | None = None

    def __post_init__(self) -> None:
        seconds("Backoff.base", self.base)
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float) \
                or not math.isfinite(self.factor) or self.factor < 1.0:
            raise SpecError("Backoff.factor", self.factor, "must be a finite number >= 1",
                            "use 1.0 for a constant pause, 2.0 to double it each retry")
        seconds("Backoff.cap", self.cap)
        if self.factor > 1.0 and self.cap is None:
            raise SpecError("Backoff.cap", None, "is required when factor > 1 (the pause "
                            "would grow without bound)", "e.g. cap=timedelta(minutes=5)")

    def spec(self) -> BackoffSpec:
        return BackoffSpec(base=seconds("Backoff.base", self.base) or 0.0,
                           factor=float(self.factor), cap=seconds("Backoff.cap", self.cap))


@dataclass(frozen=True)
class RetryStrategy:
    """``count`` retries of a failed call, paced by ``backoff`` (Shoal's default exponential
    pause when None). A task that raises `NonRecoverableError` is not retried."""

    count: int
    backoff: Backoff | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise SpecError("RetryStrategy.count", self.count, "must be an int >= 0",
                            "e.g. RetryStrategy(count=3)")
        if self.backoff is not None and not isinstance(self.backoff, Backoff):
            raise SpecError("RetryStrategy.backoff", self.backoff, "must be shoal.Backoff(...)",
                            "e.g. Backoff(base=timedelta(seconds=10), factor=2, "
                            "cap=timedelta(minutes=5))")


@dataclass(frozen=True)
class Timeout:
    """``max_runtime`` bounds each attempt (the task's timeout); ``max_queued_time`` bounds how
    long an attempt may wait for admission on the local engine (it then fails with kind
    ``"queued_timeout"``); ``deadline`` is one wall-clock budget for the whole call, from the
    moment it is made (queued) to its end, over all attempts and the pauses between them: when
    it runs out the attempt is killed and the call fails as timed out, whatever retries are
    left (Flyte's rule)."""

    max_runtime: _dt.timedelta | float | None = None
    max_queued_time: _dt.timedelta | float | None = None
    deadline: _dt.timedelta | float | None = None

    def __post_init__(self) -> None:
        seconds("Timeout.max_runtime", self.max_runtime)
        seconds("Timeout.max_queued_time", self.max_queued_time)
        seconds("Timeout.deadline", self.deadline)


def retry_settings(field: str, value: object) -> tuple[int, BackoffSpec | None]:
    """(retries, backoff) from ``retries=`` (an int or a `RetryStrategy`)."""
    if isinstance(value, RetryStrategy):
        return value.count, value.backoff.spec() if value.backoff is not None else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(field, value, "must be an int >= 0 or shoal.RetryStrategy(...)",
                        "e.g. retries=3")
    return value, None


class TimeoutSettings(NamedTuple):
    """A task's time bounds in seconds; None is no bound."""

    max_runtime: float | None
    max_queued_time: float | None
    deadline: float | None


def timeout_settings(field: str, value: object) -> TimeoutSettings:
    """The bounds of ``timeout=`` (seconds, a timedelta or a `Timeout`, whose plain forms are
    ``max_runtime``); 0 and None mean no bound, as in Flyte."""
    if isinstance(value, Timeout):
        return TimeoutSettings(seconds(f"{field}.max_runtime", value.max_runtime),
                               seconds(f"{field}.max_queued_time", value.max_queued_time),
                               seconds(f"{field}.deadline", value.deadline))
    if isinstance(value, bool) or not (value is None or isinstance(value, int | float
                                                                       | _dt.timedelta)):
        raise SpecError(field, value, "must be seconds, a timedelta or shoal.Timeout(...)",
                        "e.g. timeout=600 or timeout=timedelta(hours=2)")
    return TimeoutSettings(seconds(field, value), None, None)
