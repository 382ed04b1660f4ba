"""The allocation program's start of a Ray cluster against the real Slurm of `cluster.py`:
the head's step on the first node and the workers' step on the rest, ended by the head's end.

The node command here is a short shell program in the launcher's place (the head listens on
its GCS port, then exits; a worker waits until it is signalled, as a raylet does), so the
rules of `run_ray_steps` are seen in seconds and directly (which signal a worker got, when it
started); `test_ray.py` runs the same with the real launcher and Ray."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._runtime.node.allocation_state import AllocationState
from tests.slurm.cluster import SlurmCluster

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

NODE = r'''
echo "rank $SHOAL_NODE_RANK on $SLURMD_NODENAME at $SHOAL_NODE_ADDR, started $(date +%s.%N)"
if [ "$SHOAL_NODE_RANK" = 0 ]; then  # the head: its GCS port answers, then it ends
  exec python3 -c "import os, socket, time
s = socket.create_server(('', int(os.environ['SHOAL_MASTER_PORT'])))
print('listening', time.time(), flush=True)
time.sleep(float(os.environ.get('HEAD_SECONDS', '3')))"
fi
if [ -n "$WORKER_EXIT" ] && [ "$SHOAL_NODE_RANK" = 1 ]; then exit "$WORKER_EXIT"; fi
trap 'echo stopped by SIGTERM; exit 0' TERM
sleep 1000 & wait
'''


def allocate(slurm_cluster: SlurmCluster, tmp_path: Path,
             **more: str) -> tuple[str, AllocationState, Path]:
    """A 3-node job running the allocation program with ``NODE`` as every node's command:
    its Slurm end state, the allocation's state and its log folder."""
    (tmp_path / "node.sh").write_text(NODE)
    store = (tmp_path / "store").as_uri()
    gang = tmp_path / "gang"
    gang.mkdir()
    env = {contract.STORE: store, contract.IO: f"{store}/io", contract.GANG_LOG_DIR: str(gang),
           contract.RUNTIME: "ray", contract.GRACE_PERIOD: "5",
           contract.RAY_NODES: json.dumps([{"group": "head"}] + [{"group": "workers"}] * 2),
           contract.NODE_COMMAND: f"bash {tmp_path / 'node.sh'}",
           "PYTHONPATH": str(Path(__file__).parents[2] / "src"), **more}
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "".join(f"export {k}={shlex.quote(v)}\n"
                                                for k, v in env.items())
                      + f"exec {shlex.quote(sys.executable)} -m shoal._runtime.node.allocation\n")
    job = slurm_cluster.sbatch("--nodes=3", "--ntasks-per-node=1", "--cpus-per-task=1",
                               f"--output={gang}/batch.log", str(script))
    info = slurm_cluster.wait_for_state(job, {"COMPLETED", "FAILED"}, timeout=60)
    state = AllocationState.from_json((tmp_path / "store" / "io" / "allocation.json")
                                      .read_bytes())
    return info.state, state, gang


def test_the_heads_success_ends_the_workers_with_sigterm(slurm_cluster: SlurmCluster,
                                                          tmp_path: Path) -> None:
    end, state, gang = allocate(slurm_cluster, tmp_path)
    assert (end, state.phase, state.starts[0].exit_code) == ("COMPLETED", "succeeded", 0)
    nodes = state.starts[0].nodes
    for rank in range(3):  # each node its gang rank and log, whatever the step's numbering
        log = (gang / "r0" / f"node{rank}.log").read_text()
        assert f"rank {rank} on {nodes[rank]} at 127.0.0.{nodes[rank][1:]}" in log  # NodeAddr
        assert ("stopped by SIGTERM" in log) == (rank > 0), log  # a signal, not a kill
    # The workers started once the head's GCS port answered.
    listening = float((gang / "r0" / "node0.log").read_text().split("listening ")[1].split()[0])
    for rank in (1, 2):
        log = (gang / "r0" / f"node{rank}.log").read_text()
        assert float(log.split("started ")[1].split()[0]) > listening, log


def test_a_worker_ending_first_fails_the_start_naming_it(slurm_cluster: SlurmCluster,
                                                         tmp_path: Path) -> None:
    end, state, _ = allocate(slurm_cluster, tmp_path, WORKER_EXIT="3", HEAD_SECONDS="60")
    start = state.starts[0]
    # The step's exit code is srun's: the highest of its tasks' (3, or 143 for the other
    # worker when --kill-on-bad-exit's SIGTERM reached it before its trap was set).
    assert (end, state.phase, start.failed_node) == ("FAILED", "failed", 1)
    assert start.exit_code in (3, 143)
    assert start.message.startswith(f"Ray worker node {start.nodes[1]} (node rank 1, group "
                                    "workers) ended before the head: its raylet is gone"), \
        start.message
