"""`shoal.profile_region` (mark where a step loads data); `shoal.Profile` (what to profile)
is a value of `shoal._spec.profile`:

    env = ClusteredTaskEnvironment(name="pretrain", ..., profile=shoal.Profile(ranks=[0, 3],
                                                                             steps=(10, 12)))

or, without touching the code, ``shoal run --profile pretrain:ranks=0,3:steps=10-12 FILE TASK``.
Steps are the ones the task reports with ``shoal.log_metrics(..., step=N)``; a task that
reports none is profiled over a time window instead (``seconds=(30, 40)`` since the task
started on the rank). `shoal profile RUN` then says where each step's time went.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from shoal._runtime.observe import profiling
from shoal.errors import SpecError


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
