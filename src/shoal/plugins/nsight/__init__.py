"""``shoal.plugins.nsight``: what Flyte 2 code imports as ``flyteplugins.nsight``.

Profile a task with NVIDIA Nsight Systems by adding one decorator above ``@env.task``::

    from shoal.plugins.nsight import nsys, nsys_profile, nvtx

    @nsys_profile(trace=["cuda", "nvtx"], capture="manual")
    @env.task
    async def train(steps: int) -> str:
        warm_up()
        async with nsys.range("hot-loop"):          # one report for this block
            for step in range(steps):
                with nvtx.range(f"step_{step}"):   # a label on its timeline
                    train_step()

The decorator compiles to the profile ``shoal.Profile(tool="nsys", capture=...)`` makes
(`shoal.plugins.nsight.profile`), on Shoal's own Nsight Systems support: the chosen ranks
(rank 0 of a gang by default) run in an nsys session, each report and its ``nsys stats``
are kept with the run and in its store, and `shoal profile RUN` lists them. ``nsys`` must
be on PATH where the task runs: a local run without it is refused before it starts.
See docs/profiling.md.
"""

from __future__ import annotations

from shoal import File, trace
from shoal._api.nsight import nsys_available, session_name, under_nsys
from shoal.plugins.nsight import nsys, nvtx
from shoal.plugins.nsight.profile import DEFAULT_REPORTS, nsys_profile

__all__ = [
    "DEFAULT_REPORTS",
    "capture_report_file",
    "nsys",
    "nsys_available",
    "nsys_profile",
    "nvtx",
    "session_name",
    "under_nsys",
]


@trace
async def capture_report_file(report_path: str) -> File:
    """Put a ``.nsys-rep`` (or any file) in the run's store as a traced output: Flyte's way
    to hand a report back from a task. Shoal keeps each profile's reports in the store
    already; this is for a report made otherwise."""
    return await File.from_local(report_path)
