"""The Slurm engine's handling of a large allocation's state, fed recorded-format text.

Running 1,024 slurmd is not possible on one machine (tests/slurm runs 3), so this section
feeds the engine's and the allocation program's parsers what Slurm prints for an allocation
of N nodes named ``n0001``…, in the formats the test cluster's Slurm 22.05 prints:

- each poll of the engine (`engine.SlurmJob._follow`): ``scontrol show job -o`` of the job
  (`client.parse_job`; its ``NodeList=n[0001-N]``) and the allocation's ``allocation.json``
  (`AllocationState.from_json`, a start of N nodes);
- a node lost: ``sinfo -N -o "%N|%T|%E"`` of the N nodes, one down (`client.parse_node_states`,
  `status.lost_nodes`, as the engine names lost nodes), and the allocation program's
  ``sinfo -N -o "%N %t"`` with srun's last words of every node (`allocation.gone_nodes`);
- the node list expanded: ``scontrol show hostnames n[0001-N]`` (`allocation_state.hostnames`, a
  real scontrol; it needs a slurm.conf naming the nodes, not a controller).

Time per call (the fastest of ``REPEATS_INNER`` calls, the garbage collector off meanwhile,
as ``timeit`` advises: slower calls measure the other work on the machine) and the peak
Python memory of one (tracemalloc).
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _scale.curves import Curve
from shoal._engines.slurm import status
from shoal._engines.slurm.client import parse_job, parse_node_states
from shoal._runtime.node.allocation import gone_nodes
from shoal._runtime.node.allocation_state import AllocationState, Start, hostnames

REPEATS_INNER = 5

JOB_LINE = (
    "JobId=4242 JobName=shoal-r-scale-a0 UserId=ml(1000) GroupId=ml(1000) MCS_label=N/A "
    "Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=01:02:03 TimeLimit=2-00:00:00 TimeMin=N/A SubmitTime=2026-12-01T14:17:08 "
    "EligibleTime=2026-12-01T14:17:08 AccrueTime=2026-12-01T14:17:08 "
    "StartTime=2026-12-01T14:17:09 EndTime=2026-12-03T14:17:09 Deadline=N/A "
    "PreemptEligibleTime=2026-12-01T14:17:09 PreemptTime=None SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-12-01T14:17:09 Scheduler=Backfill Partition=gpu "
    "AllocNode:Sid=login1:21282 ReqNodeList=(null) ExcNodeList=(null) NodeList={nodelist} "
    "BatchHost=n0001 NumNodes={n} NumCPUs={cpus} NumTasks={n} CPUs/Task=96 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu={cpus},mem={mem}G,node={n},billing={cpus},gres/gpu={gpus} "
    "Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=96 MinMemoryNode=1800G "
    "MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=NO Contiguous=0 "
    "Licenses=(null) Network=(null) Command=/shared/shoal/runs/r-scale/a0.0/batch.sh "
    "WorkDir=/shared/shoal StdErr=/shared/shoal/runs/r-scale/a0.0/batch.log StdIn=/dev/null "
    "StdOut=/shared/shoal/runs/r-scale/a0.0/batch.log Power= TresPerNode=gres:gpu:8 \n")


def names(n: int) -> list[str]:
    return [f"n{i:04d}" for i in range(1, n + 1)]


def nodelist(n: int) -> str:
    return f"n[0001-{n:04d}]"


def inputs(n: int) -> dict[str, Any]:
    """The recorded-format text of an allocation of ``n`` nodes, node ``lost`` down."""
    nodes = names(n)
    lost = nodes[n * 3 // 4]
    start = Start(restart=0, at=time.time(), nodes=nodes, master="n0001", port=29500,
                  why="first", exit_code=1, ended_at=time.time(),
                  srun_says=[{"node": lost, "what": "Node failure", "first": True}] + [
                      {"node": x, "what": "task 0: Terminated", "first": False}
                      for x in nodes if x != lost])
    state = AllocationState(job="4242", phase="running", starts=[start])
    long_states = "".join(f"{x}|{'down*' if x == lost else 'allocated'}|"
                          f"{'Not responding' if x == lost else 'none'}\n" for x in nodes)
    short_states = "".join(f"{x} {'down*' if x == lost else 'alloc'}\n" for x in nodes)
    return {"job": JOB_LINE.format(nodelist=nodelist(n), n=n, cpus=96 * n, mem=1800 * n,
                                   gpus=8 * n),
            "state": state.to_json(), "start": start, "lost": lost,
            "long": long_states, "short": short_states,
            "reported": set(range(n)) - {n * 3 // 4}}


def slurm_conf(folder: Path, n: int) -> Path:
    conf = folder / "slurm.conf"
    conf.write_text(f"ClusterName=bench\nSlurmctldHost=localhost\nNodeName={nodelist(n)} "
                    "CPUs=1\nPartitionName=gpu Nodes=ALL Default=YES\n")
    return conf


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(fastest seconds per call, peak MiB of one call, its result)."""
    times = []
    got: Any = None
    gc.collect()
    gc.disable()  # as timeit does: a full collection's cost is the whole heap's, not fn's
    try:
        for _ in range(REPEATS_INNER):
            t0 = time.perf_counter()
            got = fn()
            times.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return min(times), peak / 2**20, got


def measure_once(n: int, text: dict[str, Any]) -> dict[str, float]:
    """Each figure of one size once (the allocation of ``inputs(n)``), checked."""
    t, mem, (info, state) = timed(
        lambda: (parse_job(text["job"]), AllocationState.from_json(text["state"])))
    if info.nodes != nodelist(n) or len(state.starts[0].nodes) != n:
        raise RuntimeError(f"the poll of {n} nodes read {info.nodes!r}")
    got = {"poll": t * 1e3, "poll memory": mem}
    t, _, lost = timed(lambda: status.lost_nodes(parse_node_states(text["long"])))
    if list(lost) != [text["lost"]]:
        raise RuntimeError(f"the engine named {list(lost)[:5]} lost")
    got["lost (engine)"] = t * 1e3
    t, _, gone = timed(lambda: gone_nodes(text["start"], text["reported"], text["short"]))
    if list(gone) != [text["lost"]]:
        raise RuntimeError(f"the allocation named {list(gone)[:5]} gone")
    got["lost (allocation)"] = t * 1e3
    t, _, hosts = timed(lambda: hostnames(nodelist(n)))
    if hosts != names(n):
        raise RuntimeError(f"scontrol expanded {nodelist(n)} to {hosts[:3]}…")
    got["hostnames"] = t * 1e3
    return got


def run(sizes: list[int], repeats: int) -> list[Curve]:
    section = "Slurm engine (recorded-format text)"
    curves = {
        "poll": Curve(section, "one poll: scontrol show job + allocation.json parsed", "ms",
                      per="nodes"),
        "poll memory": Curve(section, "one poll, peak Python memory", "MiB", per="nodes",
                             judged=False),
        "lost (engine)": Curve(section, "sinfo of every node parsed, lost ones named "
                               "(engine)", "ms", per="nodes"),
        "lost (allocation)": Curve(section, "srun + sinfo read, lost ones named "
                                   "(allocation)", "ms", per="nodes"),
        "hostnames": Curve(section, "scontrol show hostnames n[0001-N] (a process)", "ms",
                           per="nodes", judged=False),
    }
    folder = Path(tempfile.mkdtemp(prefix="shoal-slurm-scale-"))
    saved = os.environ.get("SLURM_CONF")
    try:
        for n in sizes:
            text = inputs(n)
            os.environ["SLURM_CONF"] = str(slurm_conf(folder, n))
            for _ in range(repeats):
                for key, value in measure_once(n, text).items():
                    curves[key].add(n, value)
            med = {key: c.medians()[n] for key, c in curves.items()}
            print(f"slurm {n} nodes: poll {med['poll']:.2f} ms, lost (engine) "
                  f"{med['lost (engine)']:.2f} ms, lost (allocation) "
                  f"{med['lost (allocation)']:.2f} ms, hostnames {med['hostnames']:.1f} ms",
                  flush=True)
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        shutil.rmtree(folder, ignore_errors=True)
    return list(curves.values())


__all__ = ["run"]
