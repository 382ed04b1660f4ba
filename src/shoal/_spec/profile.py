"""What to profile, as data: which ranks, which window, which tool (`shoal.Profile` builds it).

One text form serves both the command line (``shoal run --profile ENV:ranks=0,3:steps=10-12``)
and the contract variable that carries the setting to the ranks (``SHOAL_PROFILE``), so what a
user types is what a rank reads::

    ranks=0,3:steps=10-12:tool=torch      ranks=all:seconds=30-40:tool=nsys:shapes=1:stack=1

`parse_fields` checks the syntax only; `shoal.Profile` checks the values.
"""

from __future__ import annotations

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
