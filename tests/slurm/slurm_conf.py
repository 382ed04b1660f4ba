"""The slurm.conf of the test cluster. Every setting that differs from Slurm's default says
why: the cluster must behave like a real one (preemption, requeue, node loss) and be fast."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CPUS_PER_NODE = 4
MEMORY_PER_NODE_MB = 4000


@dataclass(frozen=True)
class NodeSpec:
    name: str
    port: int


def render_slurm_conf(*, root: Path, munge_socket: Path, ctld_port: int,
                      nodes: list[NodeSpec], user: str) -> str:
    names = ",".join(n.name for n in nodes)
    lines = [
        "ClusterName=shoaltest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        # Our own munged (own key and socket), so the machine's munge is neither needed nor
        # touched. cred_expire is also how long a requeued job waits before it may start again
        # (120 s by default): 10 s lets a preempted job run again within the test.
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket},cred_expire=10",
        f"StateSaveLocation={root / 'state'}",
        # %n: each named slurmd on this one machine needs its own spool, pid and log file.
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmdPidFile={root / 'spool' / 'slurmd-%n.pid'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # No cgroups: containers and CI machines rarely let a test delegate them; processes are
        # tracked through /proc and tasks are not bound to CPUs.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        # The nodes declare more CPUs and memory than the machine has; accept that.
        "SlurmdParameters=config_overrides",
        # CPUs and memory are both consumable, so --cpus-per-task and --mem mean what they do
        # on a real cluster; a job that asks for no memory gets a share, not the whole node.
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        f"DefMemPerCPU={MEMORY_PER_NODE_MB // CPUS_PER_NODE // 2}",
        # A job in `high` requeues the jobs in `low` that hold the nodes it needs.
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "JobRequeue=1",
        # Schedule within a second or two of every change instead of Slurm's 30-60 s cycles.
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=1,sched_interval=2",
        # A killed slurmd is noticed (node DOWN, its jobs failed or requeued) in ~10-20 s, yet a
        # loaded 2-core machine does not miss pings; a restarted node returns by itself.
        "SlurmdTimeout=10",
        "SlurmctldTimeout=10",
        "MessageTimeout=5",
        "ReturnToService=2",
        "KillWait=2",
        "InactiveLimit=0",
        "Waittime=0",
        # Finished jobs stay visible to `scontrol show job` for a minute: long enough for
        # tests to read their end state, short enough that the controller stays small.
        "MinJobAge=60",
    ]
    # Each node its own loopback address, as each machine of a cluster has its own: what
    # tells nodes apart by address (Ray's nodes, a gang's master) sees them apart here too.
    for i, n in enumerate(nodes):
        lines.append(f"NodeName={n.name} NodeHostname=localhost NodeAddr=127.0.0.{i + 1} "
                     f"Port={n.port} CPUs={CPUS_PER_NODE} RealMemory={MEMORY_PER_NODE_MB} "
                     "State=UNKNOWN")
    lines += [
        f"PartitionName=low Nodes={names} Default=YES PriorityTier=1 MaxTime=INFINITE "
        "State=UP",
        f"PartitionName=high Nodes={names} PriorityTier=10 MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"
