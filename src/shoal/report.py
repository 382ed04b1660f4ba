"""`shoal.report`: the HTML report of a task declared ``@env.task(report=True)``.

``log(html)`` / ``replace(html)`` write the ``main`` tab, ``get_tab(name)`` any other tab,
``flush()`` stores the page now; each has an awaitable form where Flyte 2 has one
(``await shoal.report.flush.aio()``). The report is stored with the run, written atomically on
every flush and once more when the task ends (also when it fails); ``shoal report RUN`` saves
it as one self-contained HTML file. Clustered tasks keep rank 0's report; other ranks' calls
are not stored (they warn once). Calls where nothing can be kept warn once, never silently.
"""

from __future__ import annotations

from shoal._api.report import current_report, flush, get_tab, log, replace
from shoal._runtime.observe import Report, Tab

__all__ = ["Report", "Tab", "current_report", "flush", "get_tab", "log", "replace"]
