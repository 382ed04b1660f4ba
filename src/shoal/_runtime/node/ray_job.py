"""The Ray driver of a KubeRay RayJob: what the RayJob's entrypoint runs on the head.

KubeRay started the raylets itself; Ray's job supervisor starts this program on the head with
the head container's variables (the contract's values of node 0, which the Kubernetes engine
puts there) and ``RAY_ADDRESS`` set to the cluster. It fetches the user's code as a node
launcher does, then runs the same rank program every engine runs, as rank 0 of one node with
the variables the launcher would give it: the rank program connects to Ray (the runtime is
``ray``) and writes the call's output where the engine reads it.
"""

from __future__ import annotations

import os

from shoal import _contract as contract
from shoal._contract import NodeEnv


def main() -> None:
    from shoal._runtime.node.launcher import fetch_code

    node = fetch_code(NodeEnv.from_env())
    os.environ.update(contract.torch_rank_env(node, 0))
    from shoal._runtime.node import rank

    rank.main()


if __name__ == "__main__":
    main()
