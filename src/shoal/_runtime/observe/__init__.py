"""What a task process writes of itself, on any engine: its metrics (`metrics.py`: the writer,
the file format) and system metrics (`system_metrics.py`), its profiles (`profiling.py`:
torch.profiler windows; `nsys_session.py`: an Nsight Systems session around the body or each
region), its report (`report_page.py`, `report_scope.py`), a gang's failure reports
(`reports.py`: who failed first), and the verdict on a hang (`hang_verdict.py`: who stopped
answering).

This module is the package's one door: the rest of Shoal imports the names in ``__all__``,
never a module inside (`tests/unit/test_layers.py`). ``metrics``, ``profiling`` and
``nsys_session`` are exported as modules too, for the callers that use many of their
functions (`shoal.log_metrics`, the profile and Nsight regions, the W&B plugin's stream).

`import shoal` imports this door (metrics, profiles, reports are public API), so the modules
only the engines and a node's launcher use — the hang verdict, gang failure reports, system
metrics — are imported on first use of one of their names (`__getattr__`), not at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from shoal._runtime.observe import metrics, nsys_session, profiling
from shoal._runtime.observe.metrics import MetricsWriter, claimed, metrics_scope, open_writer
from shoal._runtime.observe.nsys_session import (
    exec_in_session,
    wants_session,
    write_stats,
)
from shoal._runtime.observe.profiling import (
    check_profiles,
    copy_to_store,
    profile_folder,
    profiling_scope,
    store_folder,
)
from shoal._runtime.observe.report_page import MAIN_TAB, Report, Tab
from shoal._runtime.observe.report_scope import ReportSession, current_session, report_scope

if TYPE_CHECKING:
    from shoal._runtime.observe.hang_verdict import RankView, Verdict, decide, rank_views
    from shoal._runtime.observe.reports import (
        FirstFailure,
        attempt_folder,
        first_failure,
        read_reports,
    )
    from shoal._runtime.observe.system_metrics import (
        CallSampler,
        Gpus,
        TreeSampler,
        gpu_points,
        visible_device,
    )

# A name of the door -> the module of the package it comes from, imported on first use.
_ON_FIRST_USE = {
    **dict.fromkeys(("RankView", "Verdict", "decide", "rank_views"), "hang_verdict"),
    **dict.fromkeys(("FirstFailure", "attempt_folder", "first_failure", "read_reports"),
                    "reports"),
    **dict.fromkeys(("CallSampler", "Gpus", "TreeSampler", "gpu_points", "visible_device"),
                    "system_metrics"),
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once: later reads find it here
    return value

__all__ = ["MAIN_TAB", "CallSampler", "FirstFailure", "Gpus", "MetricsWriter", "RankView",
           "Report", "ReportSession", "Tab", "TreeSampler", "Verdict", "attempt_folder",
           "check_profiles", "claimed", "copy_to_store", "current_session", "decide",
           "exec_in_session", "first_failure", "gpu_points", "metrics", "metrics_scope",
           "nsys_session", "open_writer", "profile_folder", "profiling",
           "profiling_scope", "rank_views", "read_reports", "report_scope",
           "store_folder", "visible_device", "wants_session", "write_stats"]
