"""The bare Ray driver of ``ray_cluster.py``: connect to a cluster started by hand with
``ray start``, wait until all its nodes have joined, run one ``@ray.remote`` task, exit.

    python benchmarks/programs_ray_bare.py --address 127.0.0.1:PORT --nodes 3

``first_task`` is the body both sides run (``programs_ray_shoal.py`` calls it on a cluster
Shoal started). It prints marks, each ``NAME <unix time>``: ``BODY`` when the body starts (the
driver is connected and every node has joined), ``FIRST_TASK`` once the remote task's result
is back, then ``NODES <n>``, the nodes alive then, and the node the task ran on.
"""

from __future__ import annotations

import argparse
import logging
import os
import time


def first_task() -> float:
    """One ``@ray.remote`` task on the cluster this process is connected to; the wall-clock
    time its result was back."""
    import ray

    print(f"BODY {time.time():.6f}", flush=True)

    @ray.remote
    def where() -> tuple[int, str]:
        return os.getpid(), ray.get_runtime_context().get_node_id()

    pid, node = ray.get(where.remote())
    done = time.time()
    print(f"FIRST_TASK {done:.6f}", flush=True)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    ran_on = next((n["NodeManagerAddress"] for n in alive if n["NodeID"] == node), "?")
    print(f"NODES {len(alive)} task on {ran_on} pid {pid}", flush=True)
    return done


def connect(address: str, nodes: int, timeout: float) -> None:
    """``ray.init`` once the head's GCS answers, then wait for ``nodes`` live nodes: what
    Shoal's driver does before its body runs, so both bodies start on a whole cluster."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
            break
        except ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    while len([n for n in ray.nodes() if n.get("Alive")]) < nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {nodes} Ray nodes joined within {timeout:g} s")
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", required=True, help="the head's GCS, HOST:PORT")
    ap.add_argument("--nodes", type=int, default=3, help="nodes to wait for")
    ap.add_argument("--timeout", type=float, default=90.0)
    args = ap.parse_args()
    connect(args.address, args.nodes, args.timeout)
    first_task()

    import ray

    ray.shutdown()


if __name__ == "__main__":
    main()
