"""`shoal._runtime.node.allocation` without Slurm: which start a (requeued) batch job makes, the
state it keeps in a real file:// store, and the srun step it would run, whose on-node shell
command is run here by bash with the variable srun would set."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal._runtime.node.allocation import Allocation, gone_nodes
from shoal._runtime.node.allocation_state import STATE_FILE, AllocationState, Start
from shoal._storage.store import join, open_store


def environ(tmp_path: Path, *, max_restarts: int = 1, resume: bool = False,
            requeues: int | None = None, **more: str) -> dict[str, str]:
    store = (tmp_path / "store").as_uri()
    env = {"SLURM_JOB_ID": "42", contract.STORE: store,
           contract.IO: join(store, "runs", "r1", "a0.1", "0"),
           contract.GANG_LOG_DIR: str(tmp_path / "logs" / "gang" / "a0.1.0"),
           contract.MAX_RESTARTS: str(max_restarts),
           contract.RESUME_AFTER_PREEMPTION: "1" if resume else "0", **more}
    if requeues is not None:
        env["SLURM_RESTART_COUNT"] = str(requeues)
    return env


def started(restart: int, why: str = "first", uses: bool = False,
            exit_code: int | None = None) -> Start:
    return Start(restart=restart, at=1000.0 + restart, nodes=["n1", "n2"], master="n1",
                 port=29500 + restart, why=why, uses_restart=uses, exit_code=exit_code)


def saved(tmp_path: Path, state: AllocationState, **env: object) -> Allocation:
    allocation = Allocation(environ(tmp_path, **env))  # type: ignore[arg-type]
    allocation.save(state)
    return allocation


def test_the_first_start_of_a_job_makes_a_fresh_state(tmp_path: Path) -> None:
    allocation = Allocation(environ(tmp_path))
    assert allocation.load() is None
    first = allocation.first_start(allocation.load())
    assert first is not None
    state, restart, why, uses = first
    assert (restart, why, uses) == (0, "first", False)
    assert (state.job, state.requeues, state.restarts_used, state.phase, state.starts) == (
        "42", 0, 0, "running", [])


def test_a_requeue_with_resume_after_preemption_uses_no_restart(tmp_path: Path) -> None:
    state = AllocationState(job="42", starts=[started(0)], phase="stopping")
    allocation = saved(tmp_path, state, resume=True, max_restarts=0, requeues=1)
    first = allocation.first_start(allocation.load())
    assert first is not None
    state, restart, why, uses = first
    assert (restart, why, uses, state.restarts_used, state.requeues) == (
        1, "requeued", False, 0, 1)


def test_a_requeue_without_resume_uses_a_restart_while_one_is_left(tmp_path: Path) -> None:
    state = AllocationState(job="42", starts=[started(0)])
    allocation = saved(tmp_path, state, max_restarts=2, requeues=1)
    first = allocation.first_start(allocation.load())
    assert first is not None
    state, restart, why, uses = first
    assert (restart, why, uses, state.restarts_used) == (1, "requeued", True, 1)


def test_a_requeue_with_no_restart_left_fails_the_allocation_and_says_why(
        tmp_path: Path) -> None:
    state = AllocationState(job="42", restarts_used=1,
                            starts=[started(0), started(1, "failed", True, exit_code=1)])
    allocation = saved(tmp_path, state, max_restarts=1, requeues=2)
    assert allocation.first_start(allocation.load()) is None
    kept = allocation.load()  # what the driver reads
    assert kept is not None and kept.phase == "failed" and kept.requeues == 2
    assert "after start r1" in kept.message and "max_restarts=1" in kept.message
    assert "resume_after_preemption is off" in kept.message
    assert allocation.main() == 1  # the batch job ends failed, starting nothing


@pytest.mark.parametrize(("phase", "code"), [("succeeded", 0), ("failed", 1)])
def test_an_ended_allocation_starts_nothing_when_slurm_runs_it_again(
        tmp_path: Path, phase: str, code: int) -> None:
    state = AllocationState(job="42", phase=phase, starts=[started(0, exit_code=code)])
    allocation = saved(tmp_path, state, resume=True, requeues=1)
    assert allocation.first_start(allocation.load()) is None
    assert allocation.main() == code  # no srun: nothing is started
    kept = allocation.load()
    assert kept is not None and kept.phase == phase and len(kept.starts) == 1


def test_the_state_round_trips_through_json_in_the_store(tmp_path: Path) -> None:
    state = AllocationState(job="42", requeues=1, restarts_used=1, phase="running",
                            message="", starts=[started(0, exit_code=-9),
                                                started(1, "requeued", True)])
    state.starts[0].ended_at = 1010.5
    allocation = saved(tmp_path, state)
    raw = open_store(environ(tmp_path)[contract.STORE]).get_bytes(
        join(environ(tmp_path)[contract.IO], STATE_FILE))
    assert AllocationState.from_json(raw) == state == allocation.load()
    assert (state.restart, AllocationState(job="1").restart) == (1, -1)


def test_a_step_puts_one_launcher_on_every_node_with_its_output_per_node(
        tmp_path: Path) -> None:
    allocation = Allocation(environ(tmp_path, **{
        contract.NODE_COMMAND: shlex.join(["/opt/my venv/bin/python", "-m",
                                           "shoal._runtime.node.launcher"]),
        contract.SRUN_OPTIONS: shlex.join(["--container-image=reg/img:1",
                                           "--container-mounts=/a b:/a"])}))
    argv = allocation.step_argv(restart=3, nnodes=2)
    log = tmp_path / "logs" / "gang" / "a0.1.0" / "r3" / "node%n.log"
    assert argv[:7] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                        "--kill-on-bad-exit=1", "--export=ALL", f"--output={log}"]
    assert argv[7:9] == ["--container-image=reg/img:1", "--container-mounts=/a b:/a"]
    assert argv[9:11] == ["bash", "-c"]
    assert argv[11].endswith("exec '/opt/my venv/bin/python' -m shoal._runtime.node.launcher")


def test_the_on_node_command_takes_its_node_rank_from_slurm(tmp_path: Path) -> None:
    """What srun runs on each node, run here by bash: SLURM_NODEID becomes the node rank."""
    allocation = Allocation(environ(tmp_path, **{contract.NODE_COMMAND: shlex.join(
        [sys.executable, "-c", f"import os; print(os.environ[{contract.NODE_RANK!r}])"])}))
    argv = allocation.step_argv(restart=0, nnodes=2)
    assert contract.SRUN_OPTIONS not in allocation.environ and argv[7] == "bash"
    for node in ("0", "1"):
        done = subprocess.run(argv[7:], env={"SLURM_NODEID": node, "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=30, check=True)
        assert done.stdout == f"{node}\n"


def test_without_a_node_command_the_step_runs_this_pythons_launcher(tmp_path: Path) -> None:
    argv = Allocation(environ(tmp_path)).step_argv(restart=0, nnodes=1)
    assert argv[-1].endswith(shlex.join([sys.executable, "-m", "shoal._runtime.node.launcher"]))


def test_a_ray_step_gives_each_node_its_gang_rank_address_and_log_by_its_slurm_name(
        tmp_path: Path) -> None:
    """The workers' step of a Ray start, run here by bash as srun would on each node: the
    node rank is the gang's (not the step's), and so is the log's name."""
    allocation = Allocation(environ(tmp_path, **{
        contract.RUNTIME: "ray", contract.NODE_COMMAND: shlex.join([
            sys.executable, "-c", f"import os; print(os.environ[{contract.NODE_RANK!r}], "
            f"os.environ[{contract.NODE_ADDR!r}], os.environ[{contract.POD_IP!r}])"])}))
    assert allocation.ray
    start = Start(restart=2, at=0.0, nodes=["n1", "n2", "n3"], master="10.0.0.1", port=1,
                  why="first")
    argv = allocation.ray_step_argv(start, range(1, 3), ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
                                    "shoal-ray-workers-r2")
    assert argv[:8] == ["srun", "--job-name=shoal-ray-workers-r2", "--nodes=2", "--ntasks=2",
                        "--ntasks-per-node=1", "--nodelist=n2,n3", "--kill-on-bad-exit=1",
                        "--export=ALL"]
    logs = tmp_path / "logs" / "gang" / "a0.1.0" / "r2"
    logs.mkdir(parents=True)
    for name, said in (("n2", "1 10.0.0.2 10.0.0.2"), ("n3", "2 10.0.0.3 10.0.0.3")):
        subprocess.run(argv[8:], env={"SLURMD_NODENAME": name, "PATH": "/usr/bin:/bin"},
                       timeout=30, check=True)
        rank = said.split()[0]
        assert (logs / f"node{rank}.log").read_text() == f"{said}\n"
    done = subprocess.run(argv[8:], env={"SLURMD_NODENAME": "n1", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "not one of step shoal-ray-workers-r2" in done.stderr


def test_a_node_whose_task_srun_ended_with_an_exit_code_is_not_lost() -> None:
    """The lost node's task is killed with it; srun then ends the step, and the survivor's
    launcher, given SIGTERM before its ranks saw the peer go, exits 143 without a report
    (CI once took both for lost: 0 nodes left). Its slurmstepd told the exit code, so the
    machine is there; a task killed after srun began ending the step stays suspect."""
    start = Start(restart=0, at=0.0, nodes=["n1", "n2", "n3"], master="n1", port=29500,
                  why="first",
                  srun_says=[{"node": "n2", "what": "n2: task 1: Killed", "first": True},
                             {"node": "n1", "what": "n1: task 0: Exited with exit code 143",
                              "first": False},
                             {"node": "n3", "what": "n3: task 2: Killed", "first": False}])
    sinfo = "n1 alloc\nn2 alloc\nn3 alloc\n"
    assert gone_nodes(start, set(), sinfo) == {"n2": "srun: n2: task 1: Killed",
                                               "n3": "srun: n3: task 2: Killed"}
    assert gone_nodes(start, {2}, sinfo) == {"n2": "srun: n2: task 1: Killed"}


def test_the_gone_nodes_of_an_8192_node_start_are_named_in_linear_time() -> None:
    """srun's last words and sinfo's line of every node, one lost, one drained, one whose
    launcher reported (not gone): named by node name, and fast (a list scan per line took
    1-4 s at 8,192 nodes; a dict, ~10 ms)."""
    nodes = [f"n{i:04d}" for i in range(1, 8193)]
    start = Start(restart=0, at=0.0, nodes=nodes, master="n0001", port=29500, why="first",
                  srun_says=[{"node": "n3000", "what": "Node failure", "first": True},
                             {"node": "n0007", "what": "task 6: Killed", "first": False}])
    sinfo = "".join(f"{n} {'drain' if n == 'n0100' else 'alloc'}\n" for n in nodes)
    t0 = time.perf_counter()
    gone = gone_nodes(start, {6}, sinfo + "n9999 down*\n")  # n0007 (rank 6) reported
    took = time.perf_counter() - t0
    assert gone == {"n3000": "srun: Node failure", "n0100": "Slurm marks it drain"}
    assert took < 0.5, f"{took:.3f} s for 8,192 nodes"
