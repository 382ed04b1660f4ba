"""Can this node still reach the master node? Asked by a rank whose collective timed out.

A collective that times out on every rank at once points at nobody in particular: each rank
waits on the others. A network partition is told apart by the network itself: a node that
cannot open a TCP connection to the master's address (the process group's store) is cut off
from it, and the engine names that node (`unreachable` in the rank's failure report).
"""

from __future__ import annotations

import errno
import socket

from shoal._contract import NodeEnv

PROBE_TIMEOUT = 2.0  # seconds; a reachable host answers a connect within milliseconds


def master_unreachable(node: NodeEnv, timeout: float = PROBE_TIMEOUT) -> str:
    """Why this node cannot reach the master's address, or "" when it can: a refused or reset
    connection counts as reachable (the host answered; its store is gone, or going: rank 0
    fails from the same timeout, and a connection that reaches its store as it exits is
    reset)."""
    if node.nnodes < 2 or node.node_rank == 0:
        return ""  # the master is this node
    try:
        with socket.create_connection((node.master_addr, node.master_port), timeout=timeout):
            return ""
    except (ConnectionRefusedError, ConnectionResetError):
        return ""
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as e:
        return f"{errno.errorcode.get(e.errno or 0, 'error')}: {e.strerror or e}"
