"""The node launcher's part of hang diagnosis: what each of its ranks is doing, right now.

Asked by the engine (`HANG_SIGNAL` to the launcher) or by itself (a rank of its node has
waited in one collective for `early_at` of the timeout, or failed with a collective timeout),
before anything is stopped, the launcher records for each live
rank: its process state (psutil; a SIGSTOPped rank is ``stopped``), its status file (last
step, the collective it is in, see `rank_status`) and every thread's Python stack. Stacks come
from ``py-spy dump`` where it is installed (it reads a stopped process too), else from the
rank's own faulthandler through `rank_status.STACKS_SIGNAL`; ``SHOAL_HANG_STACKS=faulthandler``
forces the fallback. Every wait is bounded: a stopped process cannot run faulthandler, and
that is what its entry then says. The report goes to the attempt's store folder as
``hang-node<i>.json``, beside the failure reports, so both engines can read it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.node.rank_status import STACKS_SIGNAL, raw_stacks_path, read_status, status_dir

HANG_SIGNAL = signal.SIGUSR1  # engine -> launcher: "record your ranks now"
POLL = 0.5  # seconds between two looks at this node's status files (the ranks write them
# at most this often)
STACK_WAIT = 2.0  # seconds a rank gets to write its stacks (faulthandler) or py-spy to read them
_UNRESPONSIVE = {psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE,
                 psutil.STATUS_DEAD}


def early_at(collective_timeout: float) -> float:
    """Seconds into a collective at which its ranks are recorded, before the timeout ends
    them: their live stacks then show where they wait. py-spy takes a fraction of a second on a
    quiet machine and seconds on a loaded one, so a short timeout is asked about at its half."""
    return max(0.5 * collective_timeout, collective_timeout - 5.0)


def waiting_since(node: NodeEnv) -> float | None:
    """When the longest-waiting rank of this node entered the collective it is in (None: no
    rank is in one), from the ranks' status files."""
    folder = status_dir(node)
    first = node.node_rank * node.nproc_per_node
    since = [float(s["collective_since"]) for r in range(first, first + node.nproc_per_node)
             if (s := read_status(folder, r)) and s.get("collective_since")]
    return min(since, default=None)


def node_report_name(node_rank: int) -> str:
    return f"hang-node{node_rank}.json"


def py_spy() -> str | None:
    """py-spy's path: on PATH, or installed beside this Python (a venv not on PATH)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def stack_method() -> str:
    """"py-spy" where installed, else "faulthandler" (or what SHOAL_HANG_STACKS asks)."""
    asked = os.environ.get(contract.HANG_STACKS, "")
    if asked == "faulthandler" or (asked != "py-spy" and py_spy() is None):
        return "faulthandler"
    return "py-spy"


def process_state(pid: int) -> str:
    """psutil's status ("running", "sleeping", "stopped", "zombie", ...), "exited" if gone."""
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "exited"
    except psutil.Error as e:
        return f"unknown ({type(e).__name__})"


def _py_spy(pids: dict[int, str]) -> dict[int, tuple[str, str]]:
    """pid -> (stack, note), all ranks read at once. A stopped process is read without
    pausing it (``--nonblocking``): py-spy's own pause would wait for it forever."""
    exe = py_spy() or "py-spy"
    running = {}
    out: dict[int, tuple[str, str]] = {}
    for pid, state in pids.items():
        argv = [exe, "dump", "--pid", str(pid)]
        if state in _UNRESPONSIVE:
            argv.append("--nonblocking")
        try:
            running[pid] = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True)
        except OSError as e:
            out[pid] = ("", f"py-spy could not be started: {e}")
    deadline = time.monotonic() + STACK_WAIT + 3  # py-spy's own start-up, on a loaded machine
    for pid, proc in running.items():
        try:
            text, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out[pid] = ("", "py-spy did not answer in time")
            continue
        out[pid] = (text, "") if proc.returncode == 0 else ("", f"py-spy failed: {text.strip()}")
    return out


def _faulthandler(folder: Path, ranks: dict[int, tuple[int, str]]) -> dict[int, tuple[str, str]]:
    """rank -> (stack, note): signal every rank that can answer, then wait (bounded) until
    each one's stack file stopped growing."""
    sizes: dict[int, int] = {}
    out: dict[int, tuple[str, str]] = {}
    for rank, (pid, state) in ranks.items():
        if state in _UNRESPONSIVE or state == "exited":
            out[rank] = ("", f"the process is {state}: it cannot run faulthandler to dump its "
                             "stack (py-spy can read a stopped process: pip install py-spy)")
            continue
        path = raw_stacks_path(folder, rank)
        sizes[rank] = path.stat().st_size if path.exists() else 0
        try:
            os.kill(pid, STACKS_SIGNAL)
        except OSError as e:
            out[rank] = ("", f"could not signal it: {e}")
            sizes.pop(rank)
    deadline = time.monotonic() + STACK_WAIT
    grown: dict[int, int] = {}
    while sizes and time.monotonic() < deadline:
        time.sleep(0.05)
        for rank in list(sizes):
            path = raw_stacks_path(folder, rank)
            size = path.stat().st_size if path.exists() else 0
            if size > sizes[rank] and grown.get(rank) == size:  # written, and done writing
                with open(path, "rb") as f:
                    f.seek(sizes.pop(rank))
                    out[rank] = (f.read().decode("utf-8", "replace"), "")
            grown[rank] = size
    for rank in sizes:
        out[rank] = ("", f"it did not write its stack within {STACK_WAIT:g} s (blocked signals, "
                         "or no faulthandler registered yet)")
    return out


def collect(node: NodeEnv, rank_pids: dict[int, int]) -> dict[str, Any]:
    """The node's report: one entry per rank this launcher started (local rank -> pid)."""
    started = time.time()
    folder = status_dir(node)
    ranks: dict[int, tuple[int, str]] = {}
    for local_rank, pid in sorted(rank_pids.items()):
        ranks[node.node_rank * node.nproc_per_node + local_rank] = (pid, process_state(pid))
    method = stack_method()
    if method == "py-spy":
        by_pid = _py_spy({pid: state for pid, state in ranks.values() if state != "exited"})
        stacks = {r: by_pid.get(pid, ("", "the process had exited")) for r, (pid, _) in
                  ranks.items()}
    else:
        stacks = _faulthandler(folder, ranks)
    entries = []
    for rank, (pid, state) in ranks.items():
        stack, note = stacks.get(rank, ("", ""))
        entries.append({"rank": rank, "node": node.node_rank, "pid": pid, "state": state,
                        "status": read_status(folder, rank), "stack": stack,
                        "stack_note": note})
    return {"node": node.node_rank, "at": started, "took": time.time() - started,
            "method": method, "ranks": entries}


def write_report(node: NodeEnv, rank_pids: dict[int, int]) -> None:
    from shoal._runtime.observe import attempt_folder
    from shoal._storage.store import join, open_store

    report = collect(node, rank_pids)
    open_store(node.store).put_bytes(join(attempt_folder(node), node_report_name(node.node_rank)),
                                     json.dumps(report).encode())


def rank_timed_out(node: NodeEnv, rank: int, exit_code: int) -> bool:
    """Did ``rank`` end in a collective timeout? Its failure report says so (gloo raises), or
    it was aborted (SIGABRT: NCCL's watchdog ends the process) while its status showed a
    collective running for about the collective timeout."""
    from shoal._runtime.observe import attempt_folder
    from shoal._storage.store import join, open_store
    from shoal.errors import ObjectNotFound

    try:
        report = json.loads(open_store(node.store).get_bytes(
            join(attempt_folder(node), f"rank-{rank}.failure.json")))
    except (ObjectNotFound, ValueError):
        report = {}
    return timed_out(report, read_status(status_dir(node), rank), exit_code,
                     node.collective_timeout, time.time())


def timed_out(failure: dict[str, Any], status: dict[str, Any] | None, exit_code: int | None,
              collective_timeout: float, now: float) -> bool:
    if failure.get("collective_timeout"):
        return True
    since = (status or {}).get("collective_since")
    return (exit_code == -signal.SIGABRT and since is not None
            and now - float(since) >= 0.9 * collective_timeout)
