"""How a node launcher starts its ranks: the command line of torchrun (through Shoal's agent,
whose ranks are forked, or torchrun itself), a rank's own command line, which ranks run under
Nsight Systems, and the node's zygote when ranks are forked (`zygote.py`). Pure but for the
zygote's start; `launcher.py` runs what these say.
"""

from __future__ import annotations

import os
import sys

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.node.zygote import Zygote


def torchrun_argv(node: NodeEnv) -> list[str]:
    """torchrun's command line for this node: through `torchrun_agent` (torchrun's agent,
    which pre-imports torch and forks its ranks), or torchrun itself where ranks are not to
    be forked (``SHOAL_PREIMPORT=0``, or Nsight Systems wrapping them)."""
    forked = os.environ.get(contract.PREIMPORT, "1") != "0" and not nsys_profiled(node)
    argv = [
        sys.executable, "-m",
        "shoal._runtime.node.torchrun_agent" if forked else "torch.distributed.run",
        f"--nnodes={node.nnodes}", f"--nproc-per-node={node.nproc_per_node}",
        f"--node-rank={node.node_rank}", f"--max-restarts={node.torch_max_restarts}",
        f"--rdzv-backend={node.rdzv_backend}", f"--rdzv-id={contract.rendezvous_id(node)}",
    ]
    if node.node_addr:  # what c10d tells the workers to dial instead of this node's hostname
        argv.append(f"--local-addr={node.node_addr}")
    if node.rdzv_backend == "c10d":
        # Every simulated node resolves the endpoint to itself; say which one hosts the store.
        is_host = 1 if node.node_rank == 0 else 0
        argv += [f"--rdzv-endpoint={node.master_addr}:{node.master_port}",
                 f"--rdzv-conf=is_host={is_host},join_timeout={int(node.master_wait)}"]
    else:
        argv += [f"--master-addr={node.master_addr}", f"--master-port={node.master_port}"]
    # Under Nsight Systems every rank starts as nsys_rank, which wraps the chosen ones.
    return [*argv, "-m", "shoal._runtime.node.nsys_rank" if nsys_profiled(node) else
            "shoal._runtime.node.rank"]


def rank_argv() -> list[str]:
    return [sys.executable, "-m", "shoal._runtime.node.rank"]


def nsys_profiled(node: NodeEnv, rank: int | None = None) -> bool:
    """Whether ``rank`` (any rank of the node: None) runs under ``nsys profile``: such ranks
    are started as `shoal._runtime.node.nsys_rank`, never forked."""
    if "tool=nsys" not in node.profile:
        return False
    from shoal._spec.profile import profile_from_text

    spec = profile_from_text(node.profile, contract.PROFILE)
    return rank is None or spec.profiles_rank(rank)


def start_zygote(node: NodeEnv, reaps_orphans: bool) -> Zygote | None:
    """The node's rank factory (`zygote`), when ranks are to be forked: torch ranks started
    directly, pre-importing not turned off (``SHOAL_PREIMPORT=0``), and this process able to
    reap the ranks it re-parents (a subreaper, or the init of its PID namespace). Started
    before any thread of this process; it imports while this launcher waits for the master."""
    if not reaps_orphans or node.runtime != "torch" or node.launch == "torchrun" \
            or os.environ.get(contract.PREIMPORT, "1") == "0":
        return None
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    return Zygote(dict(os.environ))
