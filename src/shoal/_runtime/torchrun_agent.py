"""torchrun's agent with its ranks forked from a process that imported torch once.

The node launcher runs this as ``python -m shoal._runtime.torchrun_agent ARGS``, ARGS exactly
torchrun's (``torch.distributed.run``): the same elastic agent, static or c10d rendezvous and
in-node restarts (``--max-restarts``), through torch's own launcher API (`elastic_launch`).
What differs is how a rank starts: torchrun execs a fresh interpreter per rank, which then
imports torch, Shoal's rank runtime and ``torch._dynamo`` (DDP's) each time, every rank of a
node at once. Here the ranks are a function entrypoint started with multiprocessing's
``forkserver``, whose server imports the zygote's `PREIMPORTS` once, while this agent imports
torch's launcher and meets the other nodes; each rank (and each in-node restart's) is then a
fork of it. A forkserver, not a plain fork of this agent: the agent runs threads (its store,
its monitor) that a fork would copy the locks of but not the threads.

A forked rank's /proc environ is the server's, without torchrun's LOCAL_RANK: the rank names
its process ``shoal-rank-<local rank>`` so the launcher still finds it (`torchrun_ranks`).
``SHOAL_PREIMPORT=0``, or a node under Nsight Systems, runs torchrun itself instead
(`launcher.torchrun_argv`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
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
    """One rank, in a child of the forkserver, after torch's wrapper set the rank's variables:
    what ``python -m shoal._runtime.rank`` runs, returning (torch's wrapper then hands the agent
    its value and exits) instead of ending the process."""
    name_process(int(os.environ.get(contract.TORCH_LOCAL_RANK, "0")))
    from shoal._runtime import rank

    sys.argv = [rank.__file__ or ""]  # as `python -m shoal._runtime.rank` sets it
    if "numpy" in sys.modules:  # a fresh process seeds it from the OS; a fork copies it
        sys.modules["numpy"].random.seed()
    rank.main(exit_process=False)


def main(argv: list[str] | None = None) -> None:
    import multiprocessing
    from multiprocessing import forkserver

    # The entrypoint by its module's name, not `__main__`'s: the server's children unpickle it.
    from shoal._runtime.torchrun_agent import forked_rank as entrypoint
    from shoal._runtime.zygote import PREIMPORTS

    # Started first: the server imports while this agent imports torch and rendezvouses.
    multiprocessing.set_forkserver_preload([*PREIMPORTS, entrypoint.__module__])
    forkserver.ensure_running()

    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    @record
    def launch() -> None:
        config, _, _ = config_from_args(parse_args(argv))  # type: ignore[no-untyped-call]
        config.start_method = "forkserver"
        elastic_launch(config, entrypoint)()

    launch()


if __name__ == "__main__":
    main()
