"""``nsys.range(name)``: profile one block of a task, in a report of its own.

Under ``@nsys_profile(capture="manual")`` each block is collected by Nsight Systems into
``rank<r>.<name>.nsys-rep`` (the same name again: ``<name>-2``, ...) with its stats beside
it; elsewhere (a run without the profile, a rank not chosen, ``capture="task"``, whose
report already holds the whole body) the block just runs. ``with`` in a sync body,
``async with`` in an async one. Regions do not nest, profiled or not: label the parts of a
region with ``nvtx.range`` instead.

``reports`` / ``attach`` set that region's ``nsys stats`` reports and whether its
``.nsys-rep`` is kept; None (the default) takes ``nsys_profile``'s ``reports`` and
``attach_report``.
"""

from __future__ import annotations

from collections.abc import Sequence

from shoal._api.nsight import Region

__all__ = ["Region", "profile", "range"]


def range(name: str, *, reports: Sequence[str] | None = None,
          attach: bool | None = None) -> Region:
    """Profile the block as the region ``name`` (a run-name-like word: ``"hot-loop"``)."""
    return Region(name, reports=reports, attach=attach)


profile = range  # Flyte's alias: `with nsys.profile("hot-loop"):`
