"""`client.parse_job` on lines Slurm 22.05's `scontrol show job -o` printed on the test
cluster of tests/slurm (copied verbatim, the temp folders shortened), and what the engine
says when Slurm's commands are not on PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal._engines.slurm import client
from shoal._engines.slurm.client import SlurmMissing, parse_job

COMPLETED = (
    "JobId=1 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 "
    "Nice=0 Account=(null) QOS=(null) JobState=COMPLETED Reason=None Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 "
    "TimeLimit=365-00:00:00 TimeMin=N/A SubmitTime=2026-12-01T14:17:08 "
    "EligibleTime=2026-12-01T14:17:08 AccrueTime=2026-12-01T14:17:08 "
    "StartTime=2026-12-01T14:17:09 EndTime=2026-12-01T14:17:09 Deadline=N/A "
    "PreemptEligibleTime=2026-12-01T14:17:09 PreemptTime=None SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-12-01T14:17:09 Scheduler=Backfill Partition=low "
    "AllocNode:Sid=localhost:21282 ReqNodeList=(null) ExcNodeList=(null) NodeList=n1 "
    "BatchHost=n1 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=1,mem=500M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryCPU=500M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) "
    "WorkDir=/tmp/shoal-slurm-x/work StdErr=/tmp/shoal-slurm-x/work/slurm-1.out "
    "StdIn=/dev/null StdOut=/tmp/shoal-slurm-x/work/slurm-1.out Power= \n")

# `sbatch --requeue -J "my job" --chdir /tmp --wrap "sleep 60"`, then `scontrol requeue 2`.
REQUEUED = (
    "JobId=2 JobName=my job UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=BeginTime "
    "Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-12-01T14:17:12 "
    "EligibleTime=2026-12-01T14:17:23 AccrueTime=2026-12-01T14:17:23 "
    "StartTime=2026-12-01T14:17:23 EndTime=Unknown Deadline=N/A SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-12-01T14:17:09 Scheduler=Main Partition=low "
    "AllocNode:Sid=localhost:21282 ReqNodeList=(null) ExcNodeList=(null) NodeList= "
    "NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=1,mem=500M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryCPU=500M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) "
    "WorkDir=/tmp StdErr=/tmp/slurm-2.out StdIn=/dev/null StdOut=/tmp/slurm-2.out Power= \n")

# `sbatch --chdir "/tmp/su dir" "/tmp/su dir/my job.sh" "arg one" JobState=FAKE` (exit 3).
FAILED_WITH_SPACES = (
    "JobId=1 JobName=my job.sh UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=FAILED "
    "Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=3:0 RunTime=00:00:00 TimeLimit=365-00:00:00 TimeMin=N/A "
    "SubmitTime=2026-12-01T14:17:34 EligibleTime=2026-12-01T14:17:34 "
    "AccrueTime=2026-12-01T14:17:34 StartTime=2026-12-01T14:17:34 "
    "EndTime=2026-12-01T14:17:34 Deadline=N/A PreemptEligibleTime=2026-12-01T14:17:34 "
    "PreemptTime=None SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-01T14:17:34 "
    "Scheduler=Backfill Partition=low AllocNode:Sid=localhost:21282 ReqNodeList=(null) "
    "ExcNodeList=(null) NodeList=n1 BatchHost=n1 NumNodes=1 NumCPUs=1 NumTasks=1 "
    "CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=500M,node=1,billing=1 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryCPU=500M MinTmpDiskNode=0 "
    "Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) "
    "Network=(null) Command=/tmp/su dir/my job.sh arg one JobState=FAKE "
    "WorkDir=/tmp/su dir StdErr=/tmp/su dir/slurm-1.out StdIn=/dev/null "
    "StdOut=/tmp/su dir/slurm-1.out Power= \n")

# Two nodes, then `scancel`: SIGTERM (15) is the exit code's signal part.
CANCELLED = (
    "JobId=2 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 "
    "Nice=0 Account=(null) QOS=(null) JobState=CANCELLED Reason=None Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:04 "
    "TimeLimit=365-00:00:00 TimeMin=N/A SubmitTime=2026-12-01T14:17:34 "
    "EligibleTime=2026-12-01T14:17:34 AccrueTime=2026-12-01T14:17:34 "
    "StartTime=2026-12-01T14:17:34 EndTime=2026-12-01T14:17:38 Deadline=N/A "
    "PreemptEligibleTime=2026-12-01T14:17:34 PreemptTime=None SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-12-01T14:17:34 Scheduler=Backfill Partition=low "
    "AllocNode:Sid=localhost:21282 ReqNodeList=(null) ExcNodeList=(null) NodeList=n[1-2] "
    "BatchHost=n1 NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=2,mem=1000M,node=2,billing=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryCPU=500M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) "
    "WorkDir=/tmp/shoal-slurm-y/work StdErr=/tmp/shoal-slurm-y/work/slurm-2.out "
    "StdIn=/dev/null StdOut=/tmp/shoal-slurm-y/work/slurm-2.out Power= \n")


def test_a_completed_job() -> None:
    job = parse_job(COMPLETED)
    assert (job.id, job.state, job.reason, job.restarts, job.nodes, job.exit_code) == (
        "1", "COMPLETED", "None", 0, "n1", "0:0")
    assert job.terminal
    # Values holding '=' and keys holding ':' or '/' are read whole.
    assert job.fields["TRES"] == "cpu=1,mem=500M,node=1,billing=1"
    assert job.fields["AllocNode:Sid"] == "localhost:21282"
    assert job.fields["CPUs/Task"] == "1" and job.fields["Power"] == ""


def test_a_requeued_job_counts_its_restarts_and_has_no_nodes_while_pending() -> None:
    job = parse_job(REQUEUED)
    assert (job.state, job.reason, job.restarts, job.nodes) == ("PENDING", "BeginTime", 1, "")
    assert not job.terminal  # a requeued job comes back: the engine keeps following it
    assert job.fields["JobName"] == "my job"


def test_values_with_spaces_stay_whole_and_cannot_pose_as_the_jobs_fields() -> None:
    job = parse_job(FAILED_WITH_SPACES)
    assert (job.state, job.reason, job.exit_code) == ("FAILED", "NonZeroExitCode", "3:0")
    assert job.fields["Command"] == "/tmp/su dir/my job.sh arg one JobState=FAKE"
    assert job.fields["WorkDir"] == "/tmp/su dir"
    assert job.fields["StdOut"] == "/tmp/su dir/slurm-1.out"
    assert job.fields["JobName"] == "my job.sh"


def test_a_cancelled_two_node_job() -> None:
    job = parse_job(CANCELLED)
    assert (job.state, job.nodes, job.exit_code, job.terminal) == (
        "CANCELLED", "n[1-2]", "0:15", True)


def test_double_spaces_inside_a_value_are_kept() -> None:
    job = parse_job("JobId=7 JobName=a  b JobState=RUNNING WorkDir=/x  y Power= \n")
    assert (job.fields["JobName"], job.fields["WorkDir"], job.state) == ("a  b", "/x  y",
                                                                         "RUNNING")


@pytest.mark.parametrize(("state", "terminal"), [
    ("RUNNING", False), ("PENDING", False), ("REQUEUED", False), ("CONFIGURING", False),
    ("COMPLETING", False), ("SUSPENDED", False), ("COMPLETED", True), ("FAILED", True),
    ("TIMEOUT", True), ("NODE_FAIL", True), ("OUT_OF_MEMORY", True), ("PREEMPTED", True),
])
def test_which_states_end_a_job(state: str, terminal: bool) -> None:
    assert parse_job(f"JobId=3 JobState={state} Restarts=0").terminal is terminal


def test_without_slurm_on_path_the_error_names_the_commands_and_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert client.missing_commands() == list(client.NEEDED)
    with pytest.raises(SlurmMissing) as err:
        client.run(["sbatch", "--version"])
    said = str(err.value)
    assert "sbatch, scontrol, scancel, sinfo, squeue, srun not found" in said
    assert "login node" in said and "slurm-client" in said and "SLURM_CONF" in said
