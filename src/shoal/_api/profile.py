"""`shoal.Profile` (what to profile) and `shoal.profile_region` (mark where a step loads data).

    env = ClusteredTaskEnvironment(name="pretrain", ..., profile=shoal.Profile(ranks=[0, 3],
                                                                             steps=(10, 12)))

or, without touching the code, ``shoal run --profile pretrain:ranks=0,3:steps=10-12 FILE TASK``.
Steps are the ones the task reports with ``shoal.log_metrics(..., step=N)``; a task that
reports none is profiled over a time window instead (``seconds=(30, 40)`` since the task
started on the rank). `shoal profile RUN` then says where each step's time went.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from shoal._runtime import profiling
from shoal._spec.profile import TOOLS, ProfileSpec, parse_fields
from shoal.errors import SpecError

# The window when none is given: past the first steps, whose warm-up would dominate.
DEFAULT_STEPS = (10, 12)


def _window(field: str, value: object, number: type) -> tuple[Any, Any] | None:
    if value is None:
        return None
    example = "(10, 12)" if number is int else "(30, 40)"
    ok = (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
          and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value)
          and (number is float or all(isinstance(v, numbers.Integral) for v in value)))
    if not ok:
        raise SpecError(field, value, f"must be a pair (first, last) of {number.__name__}s",
                        f"e.g. {field.rsplit('.', 1)[-1]}={example}")
    first, last = number(value[0]), number(value[1])  # type: ignore[index]
    if first < 0 or last < first or (number is float and last == first):
        raise SpecError(field, value, "must satisfy 0 <= first <= last" if number is int
                        else "must satisfy 0 <= first < last",
                        f"e.g. {field.rsplit('.', 1)[-1]}={example}")
    return first, last


@dataclass(frozen=True)
class Profile:
    """Profile ``ranks`` (``"all"`` or a list) over a window of steps or seconds.

    ``steps=(10, 12)``: from the start of step 10 to the end of step 12, steps being what the
    task reports through ``shoal.log_metrics(step=)`` (a report of step N ends step N).
    ``seconds=(30, 40)``: from 30 s to 40 s after the task started on the rank. One of the two;
    neither means ``steps=(10, 12)``. ``tool="torch"``: torch.profiler, one Chrome trace per
    rank (Perfetto, HTA, `shoal profile`); ``"nsys"``: Nsight Systems wraps those ranks.
    ``record_shapes`` / ``with_stack`` make the traces larger and slower to take.
    """

    ranks: str | Sequence[int] = "all"
    steps: tuple[int, int] | None = None
    seconds: tuple[float, float] | None = None
    tool: str = "torch"
    record_shapes: bool = False
    with_stack: bool = False

    def __post_init__(self) -> None:
        ranks = self.ranks
        if ranks != "all":
            if (isinstance(ranks, str) or not isinstance(ranks, Sequence) or not ranks
                    or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                               for r in ranks)):
                raise SpecError("Profile.ranks", ranks, 'must be "all" or a non-empty list of '
                                "ranks >= 0", 'e.g. ranks=[0, 3] or ranks="all"')
            chosen = [int(r) for r in ranks]
            if len(set(chosen)) != len(chosen):
                raise SpecError("Profile.ranks", ranks, "names a rank twice",
                                f"use ranks={sorted(set(chosen))}")
            object.__setattr__(self, "ranks", tuple(sorted(chosen)))
        steps = _window("Profile.steps", self.steps, int)
        seconds = _window("Profile.seconds", self.seconds, float)
        if steps is not None and seconds is not None:
            raise SpecError("Profile.seconds", self.seconds, "a profile has one window: steps "
                            "or seconds", "give steps=(A, B) for a task that reports steps, "
                            "seconds=(a, b) for one that does not")
        if steps is None and seconds is None:
            steps = DEFAULT_STEPS
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "seconds", seconds)
        if self.tool not in TOOLS:
            raise SpecError("Profile.tool", self.tool, f"must be one of {', '.join(TOOLS)}",
                            'use tool="torch" (traces for `shoal profile`) or tool="nsys"')
        for name in ("record_shapes", "with_stack"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"Profile.{name}", getattr(self, name), "must be a bool",
                                f"use {name}=True")

    def spec(self) -> ProfileSpec:
        ranks = None if self.ranks == "all" else tuple(int(r) for r in self.ranks)
        return ProfileSpec(ranks=ranks, steps=self.steps, seconds=self.seconds, tool=self.tool,
                           record_shapes=self.record_shapes, with_stack=self.with_stack)


def parse_profile(text: str, field: str = "--profile") -> tuple[str, Profile]:
    """``ENV[:ranks=0,3|all][:steps=10-12][:seconds=30-40][:tool=nsys]`` -> (ENV, Profile)."""
    env, _, rest = text.partition(":")
    if not env:
        raise SpecError(field, text, "must start with an environment name",
                        "e.g. --profile pretrain:ranks=0:steps=10-12")
    return env, Profile(**parse_fields(rest, f"{field} {env}"))


def profile_from_text(text: str, field: str) -> ProfileSpec:
    """The setting a rank reads from the contract (written by `ProfileSpec.to_text`)."""
    return Profile(**parse_fields(text, field)).spec()


@contextlib.contextmanager
def profile_region(name: str) -> Iterator[None]:
    """Mark a region of a step: ``with shoal.profile_region("data"): batch = next(it)``.

    While this rank is profiled the region is a ``torch.profiler.record_function`` named
    ``shoal/<name>``; `shoal profile` counts ``shoal/data`` regions as data loading (as it
    does DataLoader iteration). Otherwise it does nothing and imports nothing.
    """
    if not isinstance(name, str) or not name:
        raise SpecError("profile_region(name)", name, "must be a non-empty str",
                        'e.g. shoal.profile_region("data")')
    if not profiling.active():
        yield
        return
    from torch.profiler import record_function

    with record_function(f"shoal/{name}"):
        yield
