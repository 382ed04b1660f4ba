"""The test Slurm is the real thing: batch jobs, multi-node steps, steps inside one allocation,
preemption with requeue, cancel, refused submissions and a lost node, each in seconds."""

from __future__ import annotations

import time

import psutil
import pytest

from tests.helpers import wait_until
from tests.slurm.cluster import SlurmCluster

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def test_cluster_comes_up_with_named_nodes_in_both_partitions(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.startup_s < 60
    out = slurm_cluster.run("sinfo -h -N -o '%N %P %t %c %m'").stdout.split("\n")
    rows = {tuple(line.split()) for line in out if line.strip()}
    for node in slurm_cluster.nodes:
        assert (node, "low*", "idle", "4", "4000") in rows  # declared beyond the machine
        assert (node, "high", "idle", "4", "4000") in rows


def test_batch_job_on_one_node_completes(slurm_cluster: SlurmCluster) -> None:
    job = slurm_cluster.sbatch("-N1", "--wrap", "echo ran on $SLURMD_NODENAME")
    info = slurm_cluster.wait_for_state(job, {"COMPLETED", "FAILED"})
    assert (info.state, info.exit_code, info.partition) == ("COMPLETED", "0:0", "low")
    assert slurm_cluster.output(job) == f"ran on {info.nodes}\n"
    assert info.nodes in slurm_cluster.nodes


def test_one_step_spans_two_named_nodes(slurm_cluster: SlurmCluster) -> None:
    done = slurm_cluster.run("srun -N2 --ntasks-per-node=1 printenv SLURMD_NODENAME")
    names = done.stdout.split()
    assert len(names) == 2 and len(set(names)) == 2, done.stdout
    assert set(names) <= set(slurm_cluster.nodes)


def test_an_allocation_runs_a_new_step_after_a_failed_one(slurm_cluster: SlurmCluster) -> None:
    # What a gang restart will be: the first step fails, the next step reuses the same nodes.
    script = ("srun -l bash -c 'echo step $SLURM_STEP_ID on $SLURMD_NODENAME; exit 3' "
              "|| srun -l bash -c 'echo step $SLURM_STEP_ID on $SLURMD_NODENAME'")
    job = slurm_cluster.sbatch("-N2", "--ntasks-per-node=1", "--wrap", script)
    info = slurm_cluster.wait_for_state(job, {"COMPLETED", "FAILED"})
    assert info.state == "COMPLETED", slurm_cluster.output(job)
    nodes = sorted(slurm_cluster.run(["scontrol", "show", "hostnames", info.nodes]).stdout.split())
    lines = sorted(line.split(": ", 1)[1] for line in slurm_cluster.output(job).splitlines()
                   if line[:1].isdigit())
    assert lines == sorted(f"step {s} on {n}" for s in (0, 1) for n in nodes)


def test_a_job_in_high_requeues_a_requeueable_job_in_low(slurm_cluster: SlurmCluster) -> None:
    every = str(len(slurm_cluster.nodes))
    low = slurm_cluster.sbatch("-p", "low", "--requeue", "--open-mode=append", "-N", every,
                               "--exclusive", "--wrap",
                               "echo start restart=${SLURM_RESTART_COUNT:-0}; sleep 120")
    slurm_cluster.wait_for_state(low, {"RUNNING"})
    high = slurm_cluster.sbatch("-p", "high", "-N", every, "--exclusive", "--wrap", "sleep 2")
    t0 = time.monotonic()
    requeued = slurm_cluster.wait_for_state(low, {"PENDING"}, timeout=30)
    assert requeued.restarts == 1
    assert slurm_cluster.wait_for_state(high, {"RUNNING", "COMPLETED"}).partition == "high"
    slurm_cluster.wait_for_state(high, {"COMPLETED"})
    # Back after cred_expire (10 s here): the same job id, run again from the start.
    slurm_cluster.wait_for_state(low, {"RUNNING"}, timeout=40)
    resumed_s = time.monotonic() - t0
    wait_until("the requeued job's second start",
               lambda: "restart=1" in slurm_cluster.output(low), timeout=10, every=0.2,
               detail=lambda: slurm_cluster.output(low))
    out = slurm_cluster.output(low)
    # slurmstepd says PREEMPTION, or JOB REQUEUE when the requeue lands first (a busy machine)
    assert "start restart=0" in out and "restart=1" in out, out
    assert "DUE TO PREEMPTION" in out or "DUE TO JOB REQUEUE" in out, out
    print(f"preempted low job running again {resumed_s:.1f}s after the high job came")


def test_scancel_ends_a_job_and_its_processes(slurm_cluster: SlurmCluster) -> None:
    job = slurm_cluster.sbatch("--wrap", "echo $$; exec sleep 300")
    slurm_cluster.wait_for_state(job, {"RUNNING"})
    pid = int(wait_until(f"job {job}'s first line", lambda: slurm_cluster.output(job).strip(),
                         timeout=10, every=0.1).split()[0])
    assert psutil.pid_exists(pid)
    slurm_cluster.run(["scancel", job])
    assert slurm_cluster.wait_for_state(job, {"CANCELLED"}).state == "CANCELLED"

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(f"job {job}'s process {pid} to end with scancel", gone, timeout=10, every=0.1)


def test_sbatch_refuses_an_unknown_partition(slurm_cluster: SlurmCluster) -> None:
    done = slurm_cluster.run("sbatch -p nosuch --wrap true", check=False)
    assert done.returncode != 0
    assert "invalid partition name specified" in done.stderr.lower(), done.stderr
    assert not slurm_cluster.run("squeue -h").stdout.strip()


def test_a_lost_node_fails_its_job_and_comes_back(slurm_cluster: SlurmCluster) -> None:
    victim = slurm_cluster.nodes[-1]
    job = slurm_cluster.sbatch("--no-requeue", "-N2", "-w", f"{slurm_cluster.nodes[0]},{victim}",
                               # The batch script outlives its failed step, so the job ends
                               # when the controller declares the node lost, not before.
                               "--wrap", "srun sleep 300 || sleep 300")
    slurm_cluster.wait_for_state(job, {"RUNNING"})
    t0 = time.monotonic()
    slurm_cluster.kill_node(victim)
    info = slurm_cluster.wait_for_state(job, {"NODE_FAIL", "FAILED", "CANCELLED"}, timeout=45)
    noticed_s = time.monotonic() - t0
    assert info.state == "NODE_FAIL", info
    assert slurm_cluster.node_state(victim).startswith("down")
    reason = slurm_cluster.run(["sinfo", "-h", "-R", "-n", victim, "-o", "%E"]).stdout
    assert "responding" in reason.lower(), reason
    slurm_cluster.restart_node(victim)
    assert slurm_cluster.node_state(victim) == "idle"
    print(f"lost node {victim} noticed after {noticed_s:.1f}s")
