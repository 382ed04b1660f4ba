"""Nsight Systems' vocabulary, checked: trace domains, sampling modes, `nsys stats` reports,
and the capture modes a task's code brackets itself.

`shoal.Profile(tool="nsys", ...)`, its ``--profile`` text and ``shoal.plugins.nsight``'s
``nsys_profile`` all check their values here, each under its own field name, so a typo in
``trace=`` is refused where it is written, not by ``nsys`` on a GPU node after the job waited
in a queue.

Capture modes (the windows a task's code brackets, instead of steps or seconds):

    task      the whole task body, one report per rank and call
    manual    only the code inside ``nsys.range(name)`` blocks, one report per block
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from shoal.errors import SpecError

__all__ = ["CAPTURES", "DEFAULT_TRACE", "SAMPLES", "TRACES", "check_capture", "check_sample",
           "check_stats", "check_trace"]

CAPTURES = ("task", "manual")
# `nsys launch|profile --trace=` domains (Nsight Systems 2023-2025). A newer nsys may add one:
# the refusal names this list so the fix is one line here.
TRACES = (
    "cuda", "cuda-hw", "nvtx", "cublas", "cublas-verbose", "cusparse", "cusparse-verbose",
    "cudnn", "cudla", "cudla-verbose", "cusolver", "cusolver-verbose", "opengl",
    "opengl-annotations", "openacc", "openmp", "osrt", "mpi", "nvvideo", "vulkan",
    "vulkan-annotations", "dx11", "dx11-annotations", "dx12", "dx12-annotations", "openxr",
    "openxr-annotations", "oshmem", "ucx", "wddm", "tegra-accelerators", "python-gil", "gds",
    "syscall", "nvmedia", "none",
)
DEFAULT_TRACE = ("cuda", "nvtx", "osrt")  # what `shoal run --profile ENV:tool=nsys` traces
# `--sample=`: CPU sampling of the profiled processes, of the whole machine, or none.
SAMPLES = ("process-tree", "system-wide", "none")
# A `nsys stats --report` name. The set changes between nsys versions (``gpukernsum`` became
# ``cuda_gpu_kern_sum``), so only the form is checked; a name this nsys lacks leaves its
# section out of the stats. Report options (``name:opt``) are not taken: ':' separates the
# fields of a profile's text form.
_REPORT = re.compile(r"^[a-z][a-z0-9_]*$")


def check_capture(field: str, value: object) -> str:
    if value in CAPTURES:
        return str(value)
    close = difflib.get_close_matches(str(value), CAPTURES, n=1)
    raise SpecError(field, value, "must be 'task' (the whole task body) or 'manual' (only "
                    "the code inside nsys.range(name) blocks)",
                    f"did you mean {close[0]!r}?" if close else "use capture='task'")


def _names(field: str, value: object, example: str) -> tuple[str, ...]:
    """A list of names; a bare string is refused (iterated, it would be its letters)."""
    if isinstance(value, str):
        shown = [v.strip() for v in value.split(",") if v.strip()]
        raise SpecError(field, value, "must be a list of names, not one string",
                        f"use {field.rsplit('(', 1)[-1].rstrip('=)')}={shown or [example]!r}")
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise SpecError(field, value, "must be a list of strings", f"e.g. [{example!r}]")
    if len(set(value)) != len(value):
        raise SpecError(field, list(value), "names an entry twice",
                        f"use {list(dict.fromkeys(value))!r}")
    return tuple(value)


def check_trace(field: str, value: object) -> tuple[str, ...]:
    """nsys's ``--trace`` domains: a non-empty list of known ones; ``none`` alone."""
    names = _names(field, value, "cuda")
    if not names:
        raise SpecError(field, [], "must name at least one domain (or ['none'])",
                        "e.g. ['cuda', 'nvtx']")
    for name in names:
        if name not in TRACES:
            close = difflib.get_close_matches(name, TRACES, n=1, cutoff=0.6)
            raise SpecError(field, name, "is not one of nsys's --trace domains "
                            f"({', '.join(TRACES)})",
                            f"did you mean {close[0]!r}?" if close else "e.g. ['cuda', 'nvtx']")
    if "none" in names and len(names) > 1:
        raise SpecError(field, list(names), "'none' traces nothing, so it stands alone",
                        "give ['none'] or the domains to trace")
    return names


def check_sample(field: str, value: object) -> str | None:
    """nsys's ``--sample`` mode, or None for nsys's own default."""
    if value is None or value in SAMPLES:
        return None if value is None else str(value)
    fix = ("use 'process-tree' (nsys's name for sampling the task's processes; 'cpu' is "
           "its older name)" if value == "cpu" else "leave it out for nsys's default, or "
           "use 'none' to sample nothing")
    raise SpecError(field, value, f"must be one of {', '.join(SAMPLES)} or None", fix)


def check_stats(field: str, value: object) -> tuple[str, ...]:
    """``nsys stats --report`` names (``cuda_gpu_kern_sum``); empty: nsys's default set."""
    names = _names(field, value, "cuda_gpu_kern_sum")
    for name in names:
        if not _REPORT.match(name):
            raise SpecError(field, name, "is not the form of an nsys stats report name "
                            "(lower-case letters, digits and '_')",
                            "e.g. 'cuda_gpu_kern_sum' or 'nvtx_pushpop_sum' "
                            "(`nsys stats --help-reports` lists them)")
    return names
