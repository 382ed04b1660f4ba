"""A Ray cluster per call on the Slurm engine, against the real Slurm of `cluster.py` and the
real ``ray``: one allocation of two nodes, the head (and the driver) on the first, the worker
on the second, started as two srun steps (`shoal._runtime.node.allocation.run_ray_steps`)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.slurm.cluster import SlurmCluster
from tests.slurm.test_engine import events, shoal, start, started_jobs

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
pytest.importorskip("ray")

PROGRAM = Path(__file__).parent / "programs" / "ray_cluster.py"


def run_name(what: str) -> str:
    """A run name no one else's test on this machine has at the same time: a Ray node's
    temp dir is named for its run."""
    return f"{what}-{secrets.token_hex(4)}"


def processes_of(home: Path, word: str = "") -> dict[int, str]:
    """The processes on this machine started for the test whose home is ``home`` (found by
    the ``SHOAL_HOME`` they inherit: other people's Ray on this machine is not looked at),
    whose command line holds ``word``: pid -> command line. This test's own process and its
    ``shoal`` children are left out (their command lines do not start a job's process)."""
    mine = f"SHOAL_HOME={home}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if mine in environ and word in argv and "shoal.cli.main" not in argv:
            found[int(entry.name)] = argv
    return found


def nothing_left(home: Path) -> None:
    """No process of the test's jobs is left: no raylet, GCS, launcher or driver."""
    wait_until("every process of the test's jobs gone", lambda: not processes_of(home),
               timeout=30, every=0.2, detail=lambda: "\n".join(processes_of(home).values()))


def test_a_ray_call_is_one_allocation_with_its_work_on_both_nodes(
        slurm_cluster: SlurmCluster, shoal_home: Path) -> None:
    run = run_name("ray")
    p = shoal("run", "--engine", "slurm", "--name", run, str(PROGRAM), "fan_out", "--n", "6")
    out = json.loads(p.stdout)
    assert len(out["alive"]) == 2, out  # the head and the worker joined one cluster
    assert out["ran_on"] == out["alive"], out  # the work landed on both
    assert out["sum"] == sum(i * i for i in range(6))
    (job,) = started_jobs(shoal_home, run)
    info = slurm_cluster.squeue(job)
    assert info is not None and info.state == "COMPLETED", info
    assert info.fields["NumNodes"] == "2" and out["job"] == job
    # The head's step ran the driver; the workers' step was ended by the allocation program.
    batch = next((shoal_home / "runs" / run / "logs" / "gang").glob("*/batch.log"))
    assert "start r0 ended with exit code 0" in batch.read_text()
    # The cluster's addresses, as the head wrote them, are in the run's events.
    (cluster,) = [d for k, d in events(shoal_home, run) if k == "ray_cluster"]
    assert str(cluster["dashboard_url"]).startswith("http://"), cluster
    nodes = cluster["nodes"]
    assert isinstance(nodes, list) and [n["group"] for n in nodes] == ["head", "workers"]
    nothing_left(shoal_home)


def test_two_ray_jobs_at_once_on_the_same_nodes_do_not_clash(
        slurm_cluster: SlurmCluster, shoal_home: Path, tmp_path: Path) -> None:
    settings = tmp_path / "slurm.yaml"
    settings.write_text("environments: {ray_slurm: {sbatch_options: ['--nodelist=n1,n2']}}\n")
    run = run_name("two")
    p = shoal("run", "--engine", "slurm", "--slurm-settings", str(settings), "--name", run,
              str(PROGRAM), "two_at_once", "--n", "4")
    first, second = json.loads(p.stdout)
    for out in (first, second):
        assert len(out["alive"]) == 2 and out["ran_on"] == out["alive"], out
    assert not set(first["alive"]) & set(second["alive"])  # two clusters, not one
    starts = [d for k, d in events(shoal_home, run) if k == "gang_started"]
    assert len(starts) == 2 and starts[0]["master_port"] != starts[1]["master_port"], starts
    infos = [slurm_cluster.squeue(str(d["job"])) for d in starts]
    assert all(i is not None and i.nodes == "n[1-2]" for i in infos), infos
    # At the same time: each started before the other ended.
    begun = sorted((i.fields["StartTime"], i.fields["EndTime"]) for i in infos if i)
    assert begun[1][0] <= begun[0][1], begun
    nothing_left(shoal_home)


def test_a_lost_raylet_on_the_worker_fails_the_call_naming_its_node(
        slurm_cluster: SlurmCluster, shoal_home: Path, tmp_path: Path) -> None:
    hold = tmp_path / "holding"
    run = run_name("lost")
    proc = start("run", "--engine", "slurm", "--name", run, str(PROGRAM), "fan_out",
                 "--hold", str(hold))
    try:
        wait_until("the body running", hold.exists, timeout=120, every=0.2, alive=[proc])
        # The worker's raylet: the process of node rank 1 running raylet's binary.
        raylets = wait_until("the worker's raylet", lambda: [
            pid for pid, argv in processes_of(shoal_home, "raylet").items()
            if b"SHOAL_NODE_RANK=1" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            and argv.split()[0].endswith("raylet")], timeout=10)
        for pid in raylets:
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        hold.unlink(missing_ok=True)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    assert proc.returncode == 1, f"{out}\n{err}"
    (job,) = started_jobs(shoal_home, run)
    info = slurm_cluster.squeue(job)
    assert info is not None
    worker = subprocess.run(["scontrol", "show", "hostnames", info.nodes], capture_output=True,
                            text=True, check=True, env=slurm_cluster.env).stdout.split()[1]
    assert f"Ray worker node {worker} (node rank 1, group workers) ended before the head" \
        in err, err
    nothing_left(shoal_home)
