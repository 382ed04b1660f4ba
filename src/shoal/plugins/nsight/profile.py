"""``nsys_profile``: Flyte's decorator, compiled to a `shoal.Profile` of Nsight Systems.

Flyte 2 code writes

    @nsys_profile(trace=["cuda", "nvtx"], capture="manual")
    @env.task
    async def train() -> str: ...

and ports by renaming ``flyteplugins.`` to ``shoal.plugins.``. The decorated task is the same
task with a profile its calls carry, the one ``shoal.Profile(tool="nsys", capture=...)``
makes for an environment; every engine runs it the same way (docs/profiling.md):

======================  ======================================================================
``trace``               nsys's ``--trace`` domains; each checked against nsys's list now
``sample``              nsys's ``--sample`` mode (process-tree, system-wide, none) or None
``capture``             ``"task"``: the whole body, one report per call; ``"manual"``: each
                        ``nsys.range(name)`` block, one report each
``reports``             the ``nsys stats`` reports kept beside each report (as text)
``attach_report``       False: only those stats are kept, each ``.nsys-rep`` deleted
``enabled``             False: the task is returned unchanged (its arguments still checked)
``ranks``               Shoal's: which ranks of a clustered task (default rank 0, as Flyte)
======================  ======================================================================

Reports land in the call's profile folder and the run's store
(``profiles/<action>.<attempt>/r<restart>/task|regions/rank<r>[.<region>].nsys-rep``);
`shoal profile RUN` lists them. Flyte's "GPU Profile" report tab is not rendered: the
``.nsys-stats.txt`` beside each report holds the same ``nsys stats`` tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast, overload

from shoal import Profile, TaskTemplate
from shoal._api.override import with_profile
from shoal._spec import nsys
from shoal._spec.profile import check_ranks
from shoal.errors import SpecError

__all__ = ["DEFAULT_REPORTS", "nsys_profile"]

# The `nsys stats` reports kept when ``reports=`` is not given (flyte-sdk's choice: kernels,
# memory copies by time and size, CUDA API calls, NVTX ranges).
DEFAULT_REPORTS = (
    "cuda_gpu_kern_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
    "cuda_api_sum",
    "nvtx_pushpop_sum",
)

T = TypeVar("T", bound=TaskTemplate[Any])


@overload
def nsys_profile(_task: T, *, trace: Sequence[str] = ..., sample: str | None = ...,
                 capture: str = ..., reports: Sequence[str] = ..., attach_report: bool = ...,
                 enabled: bool = ..., ranks: str | Sequence[int] = ...) -> T: ...


@overload
def nsys_profile(_task: None = None, *, trace: Sequence[str] = ..., sample: str | None = ...,
                 capture: str = ..., reports: Sequence[str] = ..., attach_report: bool = ...,
                 enabled: bool = ..., ranks: str | Sequence[int] = ...) -> Callable[[T], T]: ...


def nsys_profile(_task: T | None = None, *, trace: Sequence[str] = ("cuda", "nvtx"),
                 sample: str | None = None, capture: str = "task",
                 reports: Sequence[str] = DEFAULT_REPORTS, attach_report: bool = True,
                 enabled: bool = True, ranks: str | Sequence[int] = (0,)) -> Any:
    """Profile a task's calls with NVIDIA Nsight Systems; put it above ``@env.task``.

    ``capture="task"`` collects the whole body of each call; ``"manual"`` only its
    ``nsys.range(name)`` blocks. Of a clustered task, ``ranks`` are profiled (rank 0 unless
    given; ``"all"`` for every rank). A local run without ``nsys`` on PATH is refused before
    it starts; ``enabled=False`` keeps the decorator and profiles nothing.
    """
    where = "nsys_profile"
    checked_trace = nsys.check_trace(f"{where}(trace=)", trace)
    nsys.check_sample(f"{where}(sample=)", sample)
    nsys.check_capture(f"{where}(capture=)", capture)
    stats = nsys.check_stats(f"{where}(reports=)", reports)
    chosen = check_ranks(f"{where}(ranks=)", ranks)
    for name, value in (("attach_report", attach_report), ("enabled", enabled)):
        if not isinstance(value, bool):
            raise SpecError(f"{where}({name}=)", value, "must be a bool",
                            f"use {name}=True or {name}=False")
    profile = Profile(ranks="all" if chosen is None else chosen, tool="nsys", capture=capture,
                      trace=checked_trace, sample=sample, stats=stats,
                      keep_report=attach_report)

    def decorate(task: T) -> T:
        if not isinstance(task, TaskTemplate):
            raise SpecError("@nsys_profile", task, "must decorate a task (a function under "
                            "@env.task)", "put @nsys_profile above @env.task")
        if not enabled:
            return task
        cluster = task.env.spec().cluster
        world = cluster.world_size if cluster is not None else 1
        outside = [r for r in chosen or () if r >= world]
        if outside and cluster is None:
            raise SpecError(f"{where}(ranks=)", list(chosen or ()), f"task {task.name!r} is "
                            "a plain task: its one process is rank 0", "leave ranks out")
        if outside:
            raise SpecError(f"{where}(ranks=)", list(chosen or ()), f"must be < the world "
                            f"size ({world}) of task {task.name!r}",
                            f"use ranks between 0 and {world - 1}, or ranks='all'")
        if cluster is not None and cluster.runtime == "ray":
            raise SpecError("@nsys_profile", task.name, "a Ray environment's task body is "
                            "the driver of its cluster, not a rank Nsight Systems can wrap",
                            "profile the work inside the Ray tasks, or use "
                            "shoal.Profile(tool='torch')")
        return cast(T, with_profile(task, profile.spec()))

    if _task is not None:
        return decorate(_task)
    return decorate
