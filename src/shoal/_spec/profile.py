"""What to profile, as data: which ranks, which window, which tool (`shoal.Profile` builds it).

One text form serves both the command line (``shoal run --profile ENV:ranks=0,3:steps=10-12``)
and the contract variable that carries the setting to the ranks (``SHOAL_PROFILE``), so what a
user types is what a rank reads::

    ranks=0,3:steps=10-12:tool=torch      ranks=all:seconds=30-40:tool=nsys:shapes=1:stack=1
    ranks=0:capture=manual:tool=nsys:trace=cuda,nvtx:stats=cuda_gpu_kern_sum:report=0

`parse_fields` checks the syntax only; `shoal.Profile` checks the values (Nsight Systems'
with `shoal._spec.nsys`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shoal._spec import nsys
from shoal.errors import SpecError

TOOLS = ("torch", "nsys")
KEYS = ("ranks", "steps", "seconds", "capture", "tool", "shapes", "stack", "trace", "sample",
        "stats", "report")
SYNTAX = ("ranks=0,3|all, steps=A-B, seconds=a-b, capture=task|manual, tool=torch|nsys, "
          "shapes=0|1, stack=0|1, trace=cuda,nvtx, sample=MODE, stats=REPORT,..., report=0|1")


@dataclass(frozen=True)
class ProfileSpec:
    """A checked profile setting. ``ranks=None``: every rank. Exactly one window is set:
    ``steps`` (inclusive, as reported by ``shoal.log_metrics(step=)``), ``seconds`` (since
    the task started on the rank) or, under Nsight Systems, ``capture`` (what the task's code
    brackets: its whole body, or its ``nsys.range`` blocks). ``trace``, ``sample``, ``stats``
    and ``keep_report`` are Nsight Systems' options (``stats=()``: nsys's default reports;
    ``keep_report=False``: the ``.nsys-rep`` is deleted once summarized)."""

    ranks: tuple[int, ...] | None = None
    steps: tuple[int, int] | None = (10, 12)
    seconds: tuple[float, float] | None = None
    tool: str = "torch"
    record_shapes: bool = False
    with_stack: bool = False
    capture: str | None = None
    trace: tuple[str, ...] = nsys.DEFAULT_TRACE
    sample: str | None = None
    stats: tuple[str, ...] = ()
    keep_report: bool = True

    def profiles_rank(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    @property
    def window(self) -> str:
        """The window's folder name: ``steps-10-12``, ``seconds-30-40``, ``task`` (a whole
        task body) or ``regions`` (its ``nsys.range`` blocks)."""
        if self.capture is not None:
            return "task" if self.capture == "task" else "regions"
        if self.steps is not None:
            return f"steps-{self.steps[0]}-{self.steps[1]}"
        assert self.seconds is not None  # one of the three, by construction
        return f"seconds-{self.seconds[0]:g}-{self.seconds[1]:g}"

    def to_text(self) -> str:
        parts = ["ranks=" + ("all" if self.ranks is None else ",".join(map(str, self.ranks)))]
        if self.capture is not None:
            parts.append(f"capture={self.capture}")
        elif self.steps is not None:
            parts.append(f"steps={self.steps[0]}-{self.steps[1]}")
        if self.seconds is not None:
            parts.append(f"seconds={self.seconds[0]:g}-{self.seconds[1]:g}")
        parts.append(f"tool={self.tool}")
        if self.record_shapes:
            parts.append("shapes=1")
        if self.with_stack:
            parts.append("stack=1")
        if self.trace != nsys.DEFAULT_TRACE:
            parts.append("trace=" + ",".join(self.trace))
        if self.sample is not None:
            parts.append(f"sample={self.sample}")
        if self.stats:
            parts.append("stats=" + ",".join(self.stats))
        if not self.keep_report:
            parts.append("report=0")
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
        windows = {"steps", "seconds", "capture"}
        if key in out or (key in windows and windows & set(out)):
            raise SpecError(field, part, "repeats a setting (steps, seconds and capture are "
                            "one window)", "give each setting once")
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
        elif key in ("tool", "capture", "sample"):
            out[key] = raw
        elif key in ("trace", "stats"):
            out[key] = [name for name in raw.split(",") if name]
        elif key == "report":
            if raw not in ("0", "1"):
                raise SpecError(f"{field} {key}", raw, "must be 0 or 1",
                                "report=0 keeps only the stats of each .nsys-rep")
            out["keep_report"] = raw == "1"
        else:
            if raw not in ("0", "1"):
                raise SpecError(f"{field} {key}", raw, "must be 0 or 1", f"e.g. {key}=1")
            out["record_shapes" if key == "shapes" else "with_stack"] = raw == "1"
    return out


def check_ranks(field: str, ranks: object) -> tuple[int, ...] | None:
    """``"all"`` (None) or a non-empty list of distinct ranks >= 0, sorted."""
    if ranks == "all":
        return None
    if (isinstance(ranks, str) or not isinstance(ranks, Sequence) or not ranks
            or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0
                       for r in ranks)):
        raise SpecError(field, ranks, 'must be "all" or a non-empty list of ranks >= 0',
                        'e.g. ranks=[0, 3] or ranks="all"')
    chosen = [int(r) for r in ranks]
    if len(set(chosen)) != len(chosen):
        raise SpecError(field, ranks, "names a rank twice", f"use ranks={sorted(set(chosen))}")
    return tuple(sorted(chosen))


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
    ``seconds=(30, 40)``: from 30 s to 40 s after the task started on the rank. With
    ``tool="nsys"``, ``capture="task"`` is the whole task body and ``capture="manual"`` the
    code in ``nsys.range(name)`` blocks (``shoal.plugins.nsight``), one report each. One
    window; none means ``steps=(10, 12)``. ``tool="torch"``: torch.profiler, one Chrome trace
    per rank (Perfetto, HTA, `shoal profile`); ``"nsys"``: Nsight Systems wraps those ranks.
    ``record_shapes`` / ``with_stack`` make the traces larger and slower to take.

    Nsight Systems only: ``trace`` (its ``--trace`` domains; default cuda, nvtx, osrt),
    ``sample`` (its ``--sample`` mode), ``stats`` (the ``nsys stats`` reports kept beside each
    report; default nsys's own) and ``keep_report=False`` (keep only those stats).
    """

    ranks: str | Sequence[int] = "all"
    steps: tuple[int, int] | None = None
    seconds: tuple[float, float] | None = None
    tool: str = "torch"
    record_shapes: bool = False
    with_stack: bool = False
    capture: str | None = None
    trace: Sequence[str] | None = None
    sample: str | None = None
    stats: Sequence[str] = ()
    keep_report: bool = True

    def __post_init__(self) -> None:
        chosen = check_ranks("Profile.ranks", self.ranks)
        if chosen is not None:
            object.__setattr__(self, "ranks", chosen)
        steps = _window("Profile.steps", self.steps, int)
        seconds = _window("Profile.seconds", self.seconds, float)
        if steps is not None and seconds is not None:
            raise SpecError("Profile.seconds", self.seconds, "a profile has one window: steps "
                            "or seconds", "give steps=(A, B) for a task that reports steps, "
                            "seconds=(a, b) for one that does not")
        if self.capture is not None:
            nsys.check_capture("Profile.capture", self.capture)
            if steps is not None or seconds is not None:
                raise SpecError("Profile.capture", self.capture, "a profile has one window: "
                                "steps, seconds or capture", "leave steps and seconds out")
        elif steps is None and seconds is None:
            steps = DEFAULT_STEPS
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "seconds", seconds)
        if self.tool not in TOOLS:
            raise SpecError("Profile.tool", self.tool, f"must be one of {', '.join(TOOLS)}",
                            'use tool="torch" (traces for `shoal profile`) or tool="nsys"')
        for name in ("record_shapes", "with_stack", "keep_report"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"Profile.{name}", getattr(self, name), "must be a bool",
                                f"use {name}=True")
        self._check_nsys_options()

    def _check_nsys_options(self) -> None:
        if self.tool != "nsys":
            given = [name for name in ("capture", "trace", "sample")
                     if getattr(self, name) is not None]
            given += ["stats"] if self.stats else []
            given += ["keep_report"] if self.keep_report is not True else []
            if given:
                raise SpecError(f"Profile.{given[0]}", getattr(self, given[0]), "is a setting "
                                "of Nsight Systems only", 'add tool="nsys", or leave it out')
            return
        trace = nsys.DEFAULT_TRACE if self.trace is None else self.trace
        object.__setattr__(self, "trace", nsys.check_trace("Profile.trace", trace))
        nsys.check_sample("Profile.sample", self.sample)
        object.__setattr__(self, "stats", nsys.check_stats("Profile.stats", self.stats))

    def spec(self) -> ProfileSpec:
        ranks = None if self.ranks == "all" else tuple(int(r) for r in self.ranks)
        return ProfileSpec(ranks=ranks, steps=self.steps, seconds=self.seconds, tool=self.tool,
                           record_shapes=self.record_shapes, with_stack=self.with_stack,
                           capture=self.capture,
                           trace=tuple(self.trace or nsys.DEFAULT_TRACE), sample=self.sample,
                           stats=tuple(self.stats), keep_report=self.keep_report)



def parse_profile(text: str, field: str = "--profile") -> tuple[str, Profile]:
    """``ENV[:ranks=0,3|all][:steps=10-12|:seconds=30-40|:capture=task][:tool=nsys]...``
    -> (ENV, Profile)."""
    env, _, rest = text.partition(":")
    if not env:
        raise SpecError(field, text, "must start with an environment name",
                        "e.g. --profile pretrain:ranks=0:steps=10-12")
    return env, Profile(**parse_fields(rest, f"{field} {env}"))


def profile_from_text(text: str, field: str) -> ProfileSpec:
    """The setting a rank reads from the contract (written by `ProfileSpec.to_text`)."""
    return Profile(**parse_fields(text, field)).spec()
