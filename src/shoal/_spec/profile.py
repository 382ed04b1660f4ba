"""What to profile, as data: which ranks, which window, which tool (`shoal.Profile` builds it).

One text form serves both the command line (``shoal run --profile ENV:ranks=0,3:steps=10-12``)
and the contract variable that carries the setting to the ranks (``SHOAL_PROFILE``), so what a
user types is what a rank reads::

    ranks=0,3:steps=10-12:tool=torch      ranks=all:seconds=30-40:tool=nsys:shapes=1:stack=1

`parse_fields` checks the syntax only; `shoal.Profile` checks the values.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shoal.errors import SpecError

TOOLS = ("torch", "nsys")
KEYS = ("ranks", "steps", "seconds", "tool", "shapes", "stack")
SYNTAX = "ranks=0,3|all, steps=A-B, seconds=a-b, tool=torch|nsys, shapes=0|1, stack=0|1"


@dataclass(frozen=True)
class ProfileSpec:
    """A checked profile setting. ``ranks=None``: every rank. Exactly one window is set:
    ``steps`` (inclusive, as reported by ``shoal.log_metrics(step=)``) or ``seconds`` (since
    the task started on the rank)."""

    ranks: tuple[int, ...] | None = None
    steps: tuple[int, int] | None = (10, 12)
    seconds: tuple[float, float] | None = None
    tool: str = "torch"
    record_shapes: bool = False
    with_stack: bool = False

    def profiles_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    @property
    def window(self) -> str:
        """The window's folder name: ``steps-10-12`` or ``seconds-30-40``."""
        if self.steps is not None:
            return f"steps-{self.steps[0]}-{self.steps[1]}"
        assert self.seconds is not None  # one of the two, by construction
        return f"seconds-{self.seconds[0]:g}-{self.seconds[1]:g}"

    def to_text(self) -> str:
        parts = ["ranks=" + ("all" if self.ranks is None else ",".join(map(str, self.ranks)))]
        if self.steps is not None:
            parts.append(f"steps={self.steps[0]}-{self.steps[1]}")
        if self.seconds is not None:
            parts.append(f"seconds={self.seconds[0]:g}-{self.seconds[1]:g}")
        parts.append(f"tool={self.tool}")
        if self.record_shapes:
            parts.append("shapes=1")
        if self.with_stack:
            parts.append("stack=1")
        return ":".join(parts)


def _range(field: str, key: str, raw: str, number: type) -> tuple[Any, Any]:
    low, sep, high = raw.partition("-")
    try:
        if not sep:
            raise ValueError(raw)
        return number(low), number(high)
    except ValueError:
        example = "10-12" if number is int else "30-40"
        raise SpecError(f"{field} {key}", raw, f"must be a range A-B of {number.__name__}s",
                        f"e.g. {key}={example}") from None


def parse_fields(text: str, field: str) -> dict[str, Any]:
    """``ranks=0,3:steps=10-12:...`` as keyword arguments of `shoal.Profile`; an empty text is
    the default setting. Raises SpecError naming the part that does not parse."""
    out: dict[str, Any] = {}
    for part in filter(None, text.split(":")):
        key, sep, raw = part.partition("=")
        if not sep or key not in KEYS:
            raise SpecError(field, part, f"is not one of {SYNTAX}",
                            "e.g. ranks=0,1:steps=10-12")
        if key in out or (key == "seconds" and "steps" in out) or (
                key == "steps" and "seconds" in out):
            raise SpecError(field, part, "repeats a setting (steps and seconds are one window)",
                            "give each setting once")
        if key == "ranks":
            if raw == "all":
                out["ranks"] = "all"
                continue
            try:
                out["ranks"] = [int(r) for r in raw.split(",")]
            except ValueError:
                raise SpecError(f"{field} ranks", raw, "must be 'all' or ranks like 0,3",
                                "e.g. ranks=0,3") from None
        elif key == "steps":
            out["steps"] = _range(field, key, raw, int)
        elif key == "seconds":
            out["seconds"] = _range(field, key, raw, float)
        elif key == "tool":
            out["tool"] = raw
        else:
            if raw not in ("0", "1"):
                raise SpecError(f"{field} {key}", raw, "must be 0 or 1", f"e.g. {key}=1")
            out["record_shapes" if key == "shapes" else "with_stack"] = raw == "1"
    if "seconds" in out:
        out["steps"] = None
    return out


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
