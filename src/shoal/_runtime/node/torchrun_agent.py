"""torchrun's agent with its ranks forked from a process that imported torch once: itself.

The node launcher runs this as ``python -m shoal._runtime.node.torchrun_agent ARGS``, ARGS exactly
torchrun's (``torch.distributed.run``): the same elastic agent, static or c10d rendezvous and
in-node restarts (``--max-restarts``), through torch's own launcher API (`elastic_launch`).
What differs is how a rank starts: torchrun execs a fresh interpreter per rank, which then
imports torch, Shoal's rank runtime and ``torch._dynamo`` (DDP's) each time, every rank of a
node at once. Here the agent imports the zygote's `PREIMPORTS` once (it needs torch anyway)
and the ranks are a function entrypoint started with torch's ``fork`` start method: each
rank, and each in-node restart's, is a fork of the agent. A forkserver would have been the
threads-proof choice, but its server is a second interpreter that imports torch again: two
heavy imports a node, the cost that made this row lose to bare torchrun on 2 CPUs
(benchmarks/results/2026-12-06-cpu2-slurm-launch.md). The rank resets what the agent set
that a fresh process would not have: the signal handlers torch's agent installs.

A forked rank's /proc environ is the agent's, without torchrun's LOCAL_RANK: the rank names
its process ``shoal-rank-<local rank>`` so the launcher still finds it (`torchrun_ranks`).
``SHOAL_PREIMPORT=0``, or a node under Nsight Systems, runs torchrun itself instead
(`rank_start.torchrun_argv`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

from shoal import _contract as contract

_PR_SET_NAME = 15
RANK_PROCESS_PREFIX = "shoal-rank-"  # /proc/<pid>/comm of a forked rank: 15 bytes at most


def name_process(local_rank: int) -> None:
    """Name this process (its /proc comm) as a rank's."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        name = f"{RANK_PROCESS_PREFIX}{local_rank}".encode()[:15]
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def local_rank_of(comm: str) -> int | None:
    """The local rank a process named ``comm`` by `name_process` runs; None for others."""
    if not comm.startswith(RANK_PROCESS_PREFIX):
        return None
    value = comm[len(RANK_PROCESS_PREFIX):]
    return int(value) if value.isdigit() else None


def forked_rank() -> None:
    """One rank, in a fork of the agent, after torch's wrapper set the rank's variables:
    what ``python -m shoal._runtime.node.rank`` runs, returning (torch's wrapper then hands the
    agent its value and exits) instead of ending the process."""
    name_process(int(os.environ.get(contract.TORCH_LOCAL_RANK, "0")))
    # The agent's handlers (torch's: SIGTERM raises in the agent) are not a fresh rank's.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    from shoal._runtime.node import rank

    sys.argv = [rank.__file__ or ""]  # as `python -m shoal._runtime.node.rank` sets it
    if "numpy" in sys.modules:  # a fresh process seeds it from the OS; a fork copies it
        sys.modules["numpy"].random.seed()
    rank.main(exit_process=False)


def main(argv: list[str] | None = None) -> None:
    from shoal._runtime.forks import preimport
    from shoal._runtime.node.zygote import PREIMPORTS

    # torch, DDP's compiler stack, the rank runtime: once, for every rank
    why = preimport(PREIMPORTS)
    if why:
        print(f"shoal torchrun agent: ranks may import afresh: {why}", file=sys.stderr,
              flush=True)

    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    # The entrypoint by its module's name, not `__main__`'s (torch pickles nothing for fork,
    # but its error records name it).
    from shoal._runtime.node.torchrun_agent import forked_rank as entrypoint

    @record
    def launch() -> None:
        config, _, _ = config_from_args(parse_args(argv))  # type: ignore[no-untyped-call]
        # Fork only what is safe to fork; else torch's default (each rank a new interpreter).
        config.start_method = "spawn" if why else "fork"
        elastic_launch(config, entrypoint)()

    launch()


if __name__ == "__main__":
    main()
