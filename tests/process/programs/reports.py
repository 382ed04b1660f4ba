"""Tasks that write `shoal.report` reports, written as Flyte 2 code is (import renamed)."""

from __future__ import annotations

import time
from pathlib import Path

import shoal as flyte
import shoal.report
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

env = flyte.TaskEnvironment("reports", resources=flyte.Resources(cpu=1, memory="512Mi"))
gang_env = ClusteredTaskEnvironment(
    name="reportgang", resources=flyte.Resources(cpu=1, memory="512Mi"), replicas=2,
    nproc_per_node=1, failure_policy=ClusterFailurePolicy(collective_timeout=20, grace_period=2),
)


def _wait_for(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"nobody created {path}")
        time.sleep(0.05)


@env.task(report=True)
async def tabs(folder: str) -> int:
    """Two tabs, flushed; then waits until the test has read the flushed report."""
    flyte.report.log("<h2>Training</h2>")
    tab = flyte.report.get_tab("Metrics")
    tab.log("<table><tr><td>loss</td><td>0.25</td></tr></table>")
    await flyte.report.flush.aio()
    (Path(folder) / "flushed").write_text("")
    _wait_for(Path(folder) / "go")
    await flyte.report.replace.aio("<p>done</p>", do_flush=False)
    shoal.report.get_tab("Metrics").log("<p>final loss 0.125</p>")
    return 7


@env.task(report=True)
def fails(n: int) -> int:
    flyte.report.log(f"<p>step {n} reached</p>", do_flush=True)
    flyte.report.get_tab("Diagnostics").log("<pre>grad norm exploded</pre>")
    raise ValueError("loss is nan")


@env.task
def unreported() -> int:
    flyte.report.log("<p>lost?</p>")
    return 1


@env.task(report=True)
async def child() -> str:
    await flyte.report.log.aio("<p>from the child</p>")
    return "ok"


driver_env = flyte.TaskEnvironment("reportdriver", depends_on=[env])


@driver_env.task
async def driver() -> str:
    return await child()


@gang_env.task(report=True)
def ranks() -> int:
    """Every rank logs (no branching on the rank); only rank 0's report is kept."""
    rank = flyte.ctx().rank
    assert rank is not None
    flyte.report.log(f"<p>hello from rank {rank}</p>", do_flush=True)
    return rank
