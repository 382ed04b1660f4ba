"""``nvtx.range(message)`` and ``nvtx.mark(message)``: labels on the profiling timeline.

Where torch is loaded and built with CUDA they are NVTX ranges and marks, which Nsight
Systems shows and ``nsys stats`` sums (``nvtx_pushpop_sum``). While Shoal's torch profiler
records the rank (``shoal.Profile(tool="torch")``), they are also spans in its Chrome trace
(Perfetto, `shoal profile`), so the same labels serve both tools. Anywhere else (no torch
imported yet, a CPU build of torch, whose NVTX functions raise) they do nothing and import
nothing, so the same code runs on a laptop.
"""

from __future__ import annotations

from shoal._api.nsight import nvtx_mark as mark
from shoal._api.nsight import nvtx_range as range  # Flyte's name

__all__ = ["mark", "range"]
