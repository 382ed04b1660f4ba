"""The Slurm engine against a real Slurm: `shoal run --engine slurm` as a user types it, on a
controller and named nodes on loopback (`cluster.py`), for the seed's gangs, restarts inside
the allocation, preemption by requeue, cancel, bad placements and a lost node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from shoal._storage.metrics import RunMetrics
from shoal._storage.records import Records
from shoal.errors import NotFoundError
from tests.helpers import wait_until
from tests.slurm.cluster import SlurmCluster

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed"
GANGS = Path(__file__).parent / "programs" / "gangs.py"


def shoal(*args: str, check: bool = True, timeout: float = 240,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                       text=True, timeout=timeout, env=env or os.environ.copy())
    if check:
        assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    return p


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "shoal.cli.main", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())


def start_steps(run: str, count: int, step_seconds: float) -> subprocess.Popen[str]:
    """`shoal run --engine slurm` of the checkpointing gang `steps` (tests/slurm/programs)."""
    return start("run", "--engine", "slurm", "--name", run, str(GANGS), "steps", "--count",
                 str(count), "--step_seconds", str(step_seconds))


def wait_while_running(what: str, ready: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """`wait_until` ``what`` while the run ``proc`` goes on (Slurm's polls are slow: 90 s)."""
    wait_until(what, ready, timeout=90, every=0.2, alive=[proc])


def events(home: Path, run: str) -> list[tuple[str, dict[str, object]]]:
    return [(e.kind, e.data or {}) for e in Records(home / "shoal.db").events(run)]


def started_jobs(home: Path, run: str) -> list[str]:
    return [str(d["job"]) for k, d in events(home, run) if k == "gang_started"]


def rank_log_says(home: Path, run: str, text: str, restart: int = 0) -> bool:
    logs = (home / "runs" / run / "logs" / "gang").glob(f"a0.0/r{restart}/rank*.log")
    return any(text in p.read_text(errors="replace") for p in logs)


def test_seed_ddp_2x2_runs_as_one_allocation(slurm_cluster: SlurmCluster,
                                             shoal_home: Path) -> None:
    p = shoal("run", "--engine", "slurm", "--name", "ddp", str(SEED / "ddp.py"), "train_ddp",
              "--steps", "40")
    assert float(p.stdout) < 0.01
    # Two nodes of two ranks each, rank 3 on the second node; rank 0's value is the output.
    assert "[ddp_env.train_ddp a0 rank 3] [rank 3/4] node 1/2" in p.stderr
    (job,) = started_jobs(shoal_home, "ddp")
    info = slurm_cluster.squeue(job)
    assert info is not None and info.state == "COMPLETED"
    assert len(info.fields["NodeList"].strip("n[]").replace("-", ",").split(",")) == 2
    assert "NumNodes=2" in " ".join(f"{k}={v}" for k, v in info.fields.items())
    # Logs by rank, where `shoal logs` finds them.
    logs = shoal("logs", "ddp", "--rank", "3").stdout
    assert "[rank 3/4] node 1/2" in logs


def test_jax_2x1(slurm_cluster: SlurmCluster) -> None:
    pytest.importorskip("jax")
    p = shoal("run", "--engine", "slurm", str(SEED / "jax_sum.py"), "data_parallel_mean",
              "--n", "100")
    assert float(p.stdout) == 49.5
    assert "process 1/2" in p.stderr


def test_a_killed_rank_restarts_the_gang_as_a_new_step_of_the_same_allocation(
        slurm_cluster: SlurmCluster, shoal_home: Path) -> None:
    p = shoal("run", "--engine", "slurm", "--name", "crash", str(GANGS), "crash_once")
    out = json.loads(p.stdout)
    assert out["restart"] == "1" and out["world"] == "4" and out["sum"] == "6.0"
    # The same job, its second step: no new allocation, no requeue.
    jobs = started_jobs(shoal_home, "crash")
    assert jobs == [out["job"], out["job"]] and out["step"] == "1"
    info = slurm_cluster.squeue(out["job"])
    assert info is not None and info.restarts == 0
    restart = next(d for k, d in events(shoal_home, "crash") if k == "gang_restart")
    assert restart["rank"] == 1 and "SIGKILL" in str(restart["message"])
    assert "restart 0" in str(restart["message"]) and restart["left"] == 0


def test_a_gang_out_of_restarts_names_the_rank_node_and_error(slurm_cluster: SlurmCluster,
                                                              shoal_home: Path) -> None:
    p = shoal("run", "--engine", "slurm", str(GANGS), "always_fails", check=False)
    assert p.returncode == 1
    assert "rank 1 on node n" in p.stderr and "ValueError: rank 1 gives up" in p.stderr
    p = shoal("run", "--engine", "slurm", str(GANGS), "always_fails", "--how", "kill",
              check=False)
    assert p.returncode == 1
    assert "rank 1 on node n" in p.stderr and "SIGKILL" in p.stderr, p.stderr


def test_preemption_by_a_higher_partition_requeues_and_resumes_without_a_restart(
        slurm_cluster: SlurmCluster, shoal_home: Path) -> None:
    run = shoal_home.name + "-preempted"
    proc = start_steps(run, 16, 0.4)
    try:
        wait_while_running("step 3", lambda: rank_log_says(shoal_home, run, "step 3"), proc)
        # A job in `high` that needs every node: Slurm requeues ours to make room.
        every = str(len(slurm_cluster.nodes))
        high = slurm_cluster.sbatch("-p", "high", "-N", every, "--exclusive", "--wrap",
                                    "sleep 2")
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"{out}\n{err}"
    result = json.loads(out)
    assert result["restart"] == 1 and result["first_step"] >= 4 and result["total"] == 32
    assert slurm_cluster.wait_for_state(high, {"COMPLETED"}).state == "COMPLETED"
    kinds = [k for k, _ in events(shoal_home, run)]
    assert "gang_preempted" in kinds and "gang_restart" not in kinds
    assert "gang preempted; requeued, resumes without using a restart" in err
    (job,) = set(started_jobs(shoal_home, run))  # the same job, requeued
    info = slurm_cluster.squeue(job)
    assert info is not None and info.restarts == 1


def test_shoal_preempt_requeues_the_gang_and_cancel_scancels_it(slurm_cluster: SlurmCluster,
                                                                shoal_home: Path) -> None:
    run = shoal_home.name + "-stopped"
    proc = start_steps(run, 400, 0.2)
    try:
        wait_while_running("step 2", lambda: rank_log_says(shoal_home, run, "step 2"), proc)
        assert "preemption requested" in shoal("preempt", run).stdout
        wait_while_running("the restart",
                           lambda: rank_log_says(shoal_home, run, "step", restart=1), proc)
        (job,) = set(started_jobs(shoal_home, run))
        shoal("cancel", run)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert "gang_preempted" in [k for k, _ in events(shoal_home, run)]
    info = slurm_cluster.wait_for_state(job, {"CANCELLED"})
    assert info.state == "CANCELLED"
    assert Records(shoal_home / "shoal.db").get_run(run).state == "cancelled"


def test_a_bad_partition_is_refused_before_anything_runs(slurm_cluster: SlurmCluster,
                                                          tmp_path: Path,
                                                          shoal_home: Path) -> None:
    settings = tmp_path / "slurm.yaml"
    settings.write_text("partition: gpus\n")
    p = shoal("run", "--engine", "slurm", "--slurm-settings", str(settings), "--name", "bad",
              str(SEED / "ddp.py"), "train_ddp", check=False)
    assert p.returncode == 2  # a usage error: the settings name what is not there
    assert "Slurm settings: partition" in p.stderr and "'gpus'" in p.stderr
    assert "high, low" in p.stderr  # the fix names the partitions there are
    assert slurm_cluster.run("squeue -h -o %i").stdout.strip() == ""
    # A node too small for the environment: refused by Slurm, named by Shoal, nothing queued.
    settings.write_text("environments: {ddp_env: {sbatch_options: ['--mincpus=64']}}\n")
    p = shoal("run", "--engine", "slurm", "--slurm-settings", str(settings),
              str(SEED / "ddp.py"), "train_ddp", check=False)
    assert p.returncode == 2 and "environment 'ddp_env'" in p.stderr, p.stderr
    assert slurm_cluster.run("squeue -h -o %i").stdout.strip() == ""


def test_a_lost_node_fails_the_gang_and_is_named(slurm_cluster: SlurmCluster,
                                                 shoal_home: Path) -> None:
    run = shoal_home.name + "-lost"
    proc = start_steps(run, 30, 0.3)
    try:
        wait_while_running("step 2", lambda: rank_log_says(shoal_home, run, "step 2"), proc)
        (job,) = started_jobs(shoal_home, run)
        info = slurm_cluster.squeue(job)
        assert info is not None
        victim = [n for n in slurm_cluster.nodes if n in _nodes(slurm_cluster, info.nodes)][-1]
        slurm_cluster.kill_node(victim)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    # The gang fails (max_restarts=0), and the failure blames the lost node, not the rank
    # whose peer vanished.
    assert proc.returncode == 1, f"{out}\n{err}"
    assert f"node {victim} (node rank 1) ended first and left no report" in err, err


def test_an_elastic_gang_that_loses_a_node_goes_on_with_the_rest(
        slurm_cluster: SlurmCluster, shoal_home: Path) -> None:
    """An elastic gang (1 to 2 nodes, --no-kill) whose second node's slurmd is killed with
    everything on it: the next srun step runs on the node left, from the last checkpoint,
    using the one restart; the run succeeds at world size 1."""
    run = shoal_home.name + "-elastic"
    proc = start("run", "--engine", "slurm", "--name", run, str(GANGS), "elastic_steps",
                 "--count", "24", "--step_seconds", "0.3")
    try:
        wait_while_running("step 2", lambda: rank_log_says(shoal_home, run, "step 2"), proc)
        (job,) = started_jobs(shoal_home, run)
        info = slurm_cluster.squeue(job)
        assert info is not None
        nodes = _nodes(slurm_cluster, info.nodes)
        assert len(nodes) == 2, nodes
        slurm_cluster.kill_node(nodes[1])
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    assert proc.returncode == 0, f"{out}\n{err}"
    result = json.loads(out)
    assert result["world"] == 1 and result["restart"] == 1 and result["total"] > 24, result
    assert result["first_step"] > 2, result  # resumed from the checkpoint
    got = events(shoal_home, run)
    resized = [d for k, d in got if k == "gang_resized"]
    assert len(resized) == 1 and resized[0]["cause"] == "node_lost", got
    assert resized[0]["from"] == 2 and resized[0]["to"] == 1 and nodes[1] in str(
        resized[0]["reason"])
    starts = [d for k, d in got if k == "gang_started"]
    assert [s["cause"] for s in starts] == ["first_start", "node_lost"], starts
    assert [s["nnodes"] for s in starts] == [2, 1]
    assert set(started_jobs(shoal_home, run)) == {job}  # the same allocation went on


def _nodes(cluster: SlurmCluster, nodelist: str) -> list[str]:
    return cluster.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


PIPELINE = ROOT / "examples" / "pretrain" / "pipeline.py"


def test_the_pretraining_example_end_to_end(slurm_cluster: SlurmCluster,
                                            shoal_home: Path) -> None:
    """The README's pipeline with --engine slurm: the driver here, the data step one
    single-node job, the 2x2 gang one allocation, the evaluation another job."""
    pytest.importorskip("tokenizers")
    p = shoal("run", "--engine", "slurm", "--name", "pretrain", str(PIPELINE), "main",
              "--steps", "20", "--checkpoint-every", "10", timeout=400)
    summary = json.loads(p.stdout)
    assert summary["world_size"] == 4 and summary["steps"] == 20
    assert summary["val_loss"] < summary["untrained_val_loss"] - 1.0, summary
    assert "[pretrain.pretrain a0.2 rank 0] step    20/20" in p.stderr
    jobs = [line for line in p.stderr.splitlines() if ": Slurm job " in line]
    assert [j.split()[1:3] for j in jobs] == [["data.prepare_data", "a0.1:"],
                                              ["pretrain.pretrain", "a0.2:"],
                                              ["eval.evaluate", "a0.3:"]], jobs
    assert "(2 node(s))" in jobs[1]
    # Every rank's metrics, written on the nodes into the home they share with the driver.
    metrics = RunMetrics(shoal_home, "pretrain")
    metrics.refresh()
    series = metrics.series(name="loss", action="a0.2")
    assert sorted(s.rank for s in series) == [0, 1, 2, 3]
    assert all(len(s.values) == 20 for s in series)


def _kill_driver_at_step(home: Path, run: str, step: int, count: int) -> str:
    """Start `steps`, SIGKILL its driver once rank 0 logged ``step``; the job it left."""
    proc = start_steps(run, count, 0.3)
    try:
        wait_while_running(f"step {step}", lambda: rank_log_says(home, run, f"step {step}"), proc)
        (job,) = started_jobs(home, run)
    finally:
        proc.kill()
        proc.communicate()
    return job


def test_a_crashed_driver_leaves_its_gang_running_and_resume_follows_it(
        slurm_cluster: SlurmCluster, shoal_home: Path) -> None:
    run = shoal_home.name + "-orphan"
    job = _kill_driver_at_step(shoal_home, run, 2, count=25)
    info = slurm_cluster.squeue(job)
    assert info is not None and info.state == "RUNNING"  # the gang outlived its driver
    p = shoal("run", "--resume", run)
    assert f"following Slurm job {job} of run {run}" in p.stderr, p.stderr
    result = json.loads(p.stdout)
    assert result == {"first_step": 0, "restart": 0, "total": 50}  # never stopped, never redone
    assert slurm_cluster.run("squeue -h -o %i").stdout.strip() == ""  # and no second job


def test_cancel_of_a_crashed_run_scancels_its_jobs(slurm_cluster: SlurmCluster,
                                                    shoal_home: Path) -> None:
    run = shoal_home.name + "-abandoned"
    job = _kill_driver_at_step(shoal_home, run, 1, count=200)
    p = shoal("cancel", run)
    assert f"cancelled its Slurm job(s) {job}" in p.stdout, p.stdout
    assert slurm_cluster.wait_for_state(job, {"CANCELLED"}).state == "CANCELLED"


def test_detach_submits_the_driver_as_its_own_job(slurm_cluster: SlurmCluster,
                                                  shoal_home: Path) -> None:
    p = shoal("run", "--engine", "slurm", "--detach", "--name", "away", str(SEED / "ddp.py"),
              "train_ddp", "--steps", "10")
    assert p.stdout.strip() == "away" and "its driver is Slurm job" in p.stderr
    records = Records(shoal_home / "shoal.db")

    def ended() -> bool:
        try:
            return records.get_run("away").state in ("succeeded", "failed", "crashed")
        except NotFoundError:  # not recorded until the driver job starts
            return False

    wait_until("the detached run's end", ended, timeout=120, every=0.2)
    assert records.get_run("away").state == "succeeded"
    jobs = slurm_cluster.run("scontrol show job -o").stdout
    assert "JobName=shoal-away-driver" in jobs and "JobName=shoal-away-a0-0" in jobs
    assert "[rank 3/4] node 1/2" in shoal("logs", "away", "--rank", "3").stdout
