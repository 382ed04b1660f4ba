"""What a JobSet, its Kueue Workload and its pods say about a clustered call: pure functions.

Kubernetes spreads one gang's state over three kinds of objects, each written by a different
controller: Kueue writes the Workload (is there quota? admitted? evicted?), the JobSet
controller writes the JobSet (suspended? restarted? completed or failed?) and the kubelet
writes the pods (which node exited how, when). This module reads them into Shoal's words:

    queued ──Kueue admits──► running ──all jobs complete──► succeeded
      ▲                        │  │
      │                        │  └─a node fails, restarts left─► restarting ─► running
      │                        │                 (status.restarts + 1, new pods, new attempt)
      │                        ├─a node fails, no restarts left──► failed
      │                        ▼
      └── requeued ◄── preempted (Workload Evicted, reason Preempted: pods being stopped)

No I/O here: the client fetches, this module decides, so every rule is tested by value.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

Obj = dict[str, Any]

# Labels the JobSet and Job controllers put on every pod (kubernetes-sigs/jobset
# api/jobset/v1alpha2/jobset_types.go, pkg/constants; batch/v1 Indexed Jobs).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

Phase = Literal["queued", "running", "restarting", "preempted", "requeued", "succeeded",
                "failed"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed"})
# Kueue's Evicted reasons after which a workload is never readmitted by itself.
_DEACTIVATED = frozenset({"InactiveWorkload", "Deactivated"})


@dataclass(frozen=True)
class GangState:
    """Where a clustered call stands, and why, in one line."""

    phase: Phase
    reason: str
    restarts: int = 0  # JobSet status.restarts: the restart attempt now running
    ready: int = 0  # jobs (nodes) of the current attempt ready or done
    total: int = 0  # jobs (nodes) the JobSet asks for
    cluster_queue: str | None = None

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL


def condition(obj: Obj | None, type_: str) -> Obj | None:
    """The status condition of ``type_`` of a Kubernetes object, if it has one."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def is_true(obj: Obj | None, type_: str) -> bool:
    c = condition(obj, type_)
    return c is not None and c.get("status") == "True"


def _said(c: Obj | None, default: str = "") -> str:
    return str((c or {}).get("message") or (c or {}).get("reason") or default)


def owned_workload(jobset: Obj, workloads: Iterable[Obj]) -> Obj | None:
    """The Kueue Workload that Kueue created for ``jobset`` (by owner reference: Kueue names it
    ``jobset-<name>-<hash>``, so the name alone does not say)."""
    meta = jobset.get("metadata") or {}
    for w in workloads:
        for ref in (w.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") == "JobSet" and (
                    ref.get("uid") == meta.get("uid") if meta.get("uid")
                    else ref.get("name") == meta.get("name")):
                return w
    return None


def _jobs(jobset: Obj) -> tuple[int, int]:
    total = sum(int(rj.get("replicas", 1) or 0)
                for rj in (jobset.get("spec") or {}).get("replicatedJobs") or [])
    ready = sum(int(s.get("ready", 0) or 0) + int(s.get("succeeded", 0) or 0)
                for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or [])
    return ready, total


def gang_state(jobset: Obj, workload: Obj | None = None, *,
               seen_restarts: int | None = None) -> GangState:
    """The state of a JobSet (and its Workload, when Kueue manages it).

    ``seen_restarts`` is the restart count the caller last saw: a higher one now reads as
    ``restarting`` even if the new pods are already up. Without it, ``restarting`` means a
    restart happened and the new attempt's jobs are not all ready yet.
    """
    restarts = int((jobset.get("status") or {}).get("restarts") or 0)
    ready, total = _jobs(jobset)
    queue = (((workload or {}).get("status") or {}).get("admission") or {}).get("clusterQueue")

    def state(phase: Phase, reason: str) -> GangState:
        return GangState(phase, reason, restarts, ready, total, queue)

    if is_true(jobset, "Completed"):
        return state("succeeded", _said(condition(jobset, "Completed"), "all jobs completed"))
    if is_true(jobset, "Failed"):
        c = condition(jobset, "Failed") or {}
        return state("failed", f"{c.get('reason', 'Failed')}: {_said(c, 'the JobSet failed')}")
    if workload is not None and is_true(workload, "Finished"):
        c = condition(workload, "Finished") or {}
        ok = c.get("reason") == "Succeeded"
        return state("succeeded" if ok else "failed", f"Kueue: {_said(c, 'finished')}")

    suspended = bool((jobset.get("spec") or {}).get("suspend"))
    if workload is None:
        if suspended:
            return state("queued", "waiting for Kueue to create a Workload for the JobSet (is "
                                   "its kueue.x-k8s.io/queue-name label right, and Kueue up?)")
        return state(*_running(restarts, ready, total, seen_restarts))

    evicted = condition(workload, "Evicted")
    reserved = is_true(workload, "QuotaReserved")
    pending = _said(condition(workload, "QuotaReserved"), "waiting for quota")
    if evicted and evicted.get("status") == "True":
        why = str(evicted.get("reason") or "")
        if why in _DEACTIVATED or (workload.get("spec") or {}).get("active") is False:
            return state("failed", f"Kueue deactivated the workload: {_said(evicted)}")
        if reserved:
            verb = "preempting" if why == "Preempted" else f"evicting ({why})"
            return state("preempted", f"Kueue is {verb} the workload, its pods are being "
                                      f"stopped: {_said(evicted)}")
        return state("requeued", f"evicted ({why or 'unknown reason'}: {_said(evicted)}); "
                                 f"waiting to be admitted again: {pending}")
    if not is_true(workload, "Admitted"):
        if not suspended:
            # Kueue resumes a JobSet only once its Workload is admitted, and suspends it again
            # to evict it (the Evicted branch above): this view of the Workload predates its
            # admission, its watch trailing the JobSet's (a running gang is not queued again).
            return state(*_running(restarts, ready, total, seen_restarts))
        if reserved:
            return state("queued", f"quota reserved in ClusterQueue {queue}; waiting for "
                                   f"admission checks: {_said(condition(workload, 'Admitted'))}")
        return state("queued", pending)
    if suspended:
        return state("queued", f"admitted by ClusterQueue {queue}; waiting for Kueue to "
                               f"resume the JobSet")
    return state(*_running(restarts, ready, total, seen_restarts))


def _running(restarts: int, ready: int, total: int, seen: int | None) -> tuple[Phase, str]:
    progress = f"{ready}/{total} jobs ready" if total else "started"
    if (seen is not None and restarts > seen) or (seen is None and restarts and ready < total):
        return "restarting", f"the JobSet restarted all its jobs (restart {restarts}); {progress}"
    return "running", progress + (f" (restart {restarts})" if restarts else "")


# -- pods ------------------------------------------------------------------------------------------
def _int_label(pod: Obj, key: str) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(key, (meta.get("annotations") or {}).get(key))
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def restart_attempt_of(pod: Obj) -> int:
    """Which JobSet restart attempt created the pod (0 for a plain Job's pods)."""
    return _int_label(pod, RESTART_ATTEMPT) or 0


def node_index(pod: Obj, pods_per_job: int = 1) -> int | None:
    """Which node of the gang the pod is: ``job-index × pods_per_job + completion index``
    (one pod per Job: the Job's index; one Indexed Job of N pods: the completion index)."""
    job, completion = _int_label(pod, JOB_INDEX), _int_label(pod, COMPLETION_INDEX)
    if job is None and completion is None:
        return None
    return (job or 0) * pods_per_job + (completion or 0)


def signal_of(exit_code: int | None) -> str | None:
    """The signal a container's exit code stands for (128 + n): 137 → SIGKILL, 143 → SIGTERM."""
    if exit_code is None or not 128 < exit_code <= 128 + 64:
        return None
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return None


def _time(stamp: Any) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class RankFailure:
    """The first node (and, when its report says, rank) that failed in one restart attempt."""

    node: int
    rank: int | None  # exact only when the container's termination message names local_rank
    first_rank: int  # the node's first rank: node × nproc_per_node
    pod: str
    container: str
    restart_attempt: int
    exit_code: int | None
    signal: str | None
    reason: str  # the kubelet's: Error, OOMKilled, Evicted, ...
    message: str
    finished_at: str | None
    disrupted: bool  # DisruptionTarget: drained, evicted, preempted by the scheduler
    while_deleting: bool  # it ended after its pod was asked to stop: a consequence

    def as_dict(self) -> Obj:
        return asdict(self)


def _while_deleting(pod: Obj, finished: datetime | None) -> bool:
    """Did the container end because a controller was deleting its pod (a restart tearing
    down the other nodes, Kueue suspending the JobSet), rather than on its own? Timestamps
    have one-second resolution, so an end in the same second as the request counts as on its
    own. A disruption (DisruptionTarget) is a cause, not a consequence, even though the pod
    is deleted too."""
    if is_true(pod, "DisruptionTarget"):
        return False
    meta = pod.get("metadata") or {}
    deadline = _time(meta.get("deletionTimestamp"))
    if deadline is None:
        return False
    asked = deadline - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))
    return finished is None or finished > asked


def _terminations(pod: Obj) -> Iterable[tuple[Obj, Obj]]:
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            if state.get("terminated"):
                yield cs, state["terminated"]


def _local_rank(message: str) -> int | None:
    """The launcher may write its node report as the termination message (JSON)."""
    try:
        report = json.loads(message)
        value = report.get("local_rank") if isinstance(report, dict) else None
        return value if isinstance(value, int) else None
    except ValueError:
        return None


def failures(pods: Iterable[Obj], restart_attempt: int, *, nproc_per_node: int = 1,
             pods_per_job: int = 1) -> list[RankFailure]:
    """Every non-zero container exit of the attempt's pods, the root cause first: ones that
    ended on their own (or by a disruption) before ones that ended while a controller was
    deleting their pod; then the earliest; at the same second a SIGTERM last (it is most often
    the consequence of another node's failure); then the lowest node."""
    found = []
    for pod in pods:
        node = node_index(pod, pods_per_job)
        if node is None or restart_attempt_of(pod) != restart_attempt:
            continue
        name = str((pod.get("metadata") or {}).get("name", ""))
        for cs, term in _terminations(pod):
            code = term.get("exitCode")
            if code in (0, None):
                continue
            finished = _time(term.get("finishedAt"))
            message = str(term.get("message") or "")
            local = _local_rank(message)
            found.append((finished, RankFailure(
                node=node, rank=None if local is None else node * nproc_per_node + local,
                first_rank=node * nproc_per_node, pod=name, container=str(cs.get("name", "")),
                restart_attempt=restart_attempt, exit_code=int(code), signal=signal_of(code),
                reason=str(term.get("reason") or ""), message=message,
                finished_at=term.get("finishedAt"), disrupted=is_true(pod, "DisruptionTarget"),
                while_deleting=_while_deleting(pod, finished))))
        status = pod.get("status") or {}
        if status.get("phase") == "Failed" and not any(True for _ in _terminations(pod)):
            found.append((None, RankFailure(  # e.g. evicted before a container ran
                node=node, rank=None, first_rank=node * nproc_per_node, pod=name, container="",
                restart_attempt=restart_attempt, exit_code=None, signal=None,
                reason=str(status.get("reason") or "Failed"),
                message=str(status.get("message") or ""), finished_at=None,
                disrupted=is_true(pod, "DisruptionTarget"),
                while_deleting=_while_deleting(pod, None))))
    never = datetime.max.replace(tzinfo=None)
    found.sort(key=lambda f: (f[1].while_deleting,
                              (f[0].replace(tzinfo=None) if f[0] else never),
                              f[1].signal == "SIGTERM", f[1].node))
    return [f for _, f in found]


def first_failing_rank(pods: Iterable[Obj], restart_attempt: int, *, nproc_per_node: int = 1,
                       pods_per_job: int = 1) -> RankFailure | None:
    """The failure that most likely started it all in ``restart_attempt``, or None if no
    container of that attempt failed on its own (exits while a controller deleted the pods —
    a Kueue preemption, the restart's tear-down — are consequences; `failures` lists them).
    Pass the pods as last seen, deleted ones too (see `PodHistory`): the JobSet controller
    deletes a failed attempt's pods when it restarts."""
    found = failures(pods, restart_attempt, nproc_per_node=nproc_per_node,
                     pods_per_job=pods_per_job)
    return found[0] if found and not found[0].while_deleting else None


def pod_key(pod: Obj) -> str:
    """A pod's identity across its versions: its uid (a name is reused by a new pod)."""
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name"))


def lost_reason(pod: Obj, *, deleted: bool = False, reported: bool | None = None) -> str | None:
    """Why the node of ``pod`` counts as lost (its pod or host gone, not its ranks failing),
    or None. An elastic gang goes on without a lost node; after a rank failure it restarts
    at the same size. Lost: the pod was disrupted (``DisruptionTarget``: drained, evicted,
    its node gone), ``deleted`` while its gang ran (the caller knows: not by a Kueue
    suspension, nor after the gang ended), on a node that stopped answering (phase
    ``Unknown``), failed before a container ran, or its container
    ended non-zero on its own while neither its launcher nor a rank left a report
    (``reported`` False; None: the reports were not read) — the launcher died with its pod,
    as the local engine counts a launcher whose process tree ended."""
    status = pod.get("status") or {}
    if status.get("phase") == "Succeeded":
        return None
    name = (pod.get("metadata") or {}).get("name", "?")
    disrupted = condition(pod, "DisruptionTarget")
    if disrupted is not None and disrupted.get("status") == "True":
        return (f"pod {name} was disrupted ({disrupted.get('reason') or 'DisruptionTarget'}"
                + (f": {disrupted['message']}" if disrupted.get("message") else "") + ")")
    if deleted:
        return f"pod {name} was deleted while the gang ran"
    if status.get("phase") == "Unknown":
        return f"pod {name}'s node stopped answering (phase Unknown)"
    terms = list(_terminations(pod))
    if status.get("phase") == "Failed" and not terms:
        why = status.get("reason") or "Failed"
        return f"pod {name} failed before its container ran ({why})"
    if reported is False:
        for _, term in terms:
            code = term.get("exitCode")
            if code in (0, None) or _while_deleting(pod, _time(term.get("finishedAt"))):
                continue
            how = signal_of(code) or f"exit code {code}"
            return f"pod {name} ended ({how}) without a report from its launcher"
    return None


def lost_nodes(pods: Iterable[Obj], restart_attempt: int, *, deleted: Iterable[str] = (),
               reported: Iterable[int] | None = None, pods_per_job: int = 1
               ) -> dict[int, str]:
    """The nodes of ``restart_attempt`` that were lost (node -> why, see `lost_reason`);
    ``deleted``: the keys (`pod_key`) of the pods deleted while the gang ran; ``reported``:
    the nodes with a report in the store (None: not read)."""
    gone, told = set(deleted), None if reported is None else set(reported)
    lost: dict[int, str] = {}
    for pod in pods:
        node = node_index(pod, pods_per_job)
        if node is None or restart_attempt_of(pod) != restart_attempt or node in lost:
            continue
        why = lost_reason(pod, deleted=pod_key(pod) in gone,
                          reported=None if told is None else node in told)
        if why is not None:
            lost[node] = why
    return dict(sorted(lost.items()))


def deleted_before(pods: Iterable[Obj], moment: Any) -> set[str]:
    """The keys (`pod_key`) of the pods whose deletion was asked before ``moment`` (a JobSet's
    Failed transition): deleted while the gang ran, which only a person, a drain or a lost
    host does to an elastic start (JobSet never restarts it; it deletes pods once it ended).
    Timestamps have one-second resolution: one asked in the same second does not count."""
    until = _time(moment)
    if until is None:
        return set()
    found = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        deadline = _time(meta.get("deletionTimestamp"))
        if deadline is None:
            continue
        asked = deadline - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))
        if asked < until:
            found.add(pod_key(pod))
    return found


class PodHistory:
    """The last known version of every pod a watch has shown, deleted ones included, so the
    exit codes of an attempt survive the controller deleting its pods."""

    def __init__(self) -> None:
        self._pods: dict[str, Obj] = {}
        self.deleted: set[str] = set()

    def apply(self, event_type: str, pod: Obj) -> None:
        key = pod_key(pod)
        self._pods[key] = pod
        if event_type == "DELETED":
            self.deleted.add(key)

    def pods(self, restart_attempt: int | None = None) -> list[Obj]:
        return [p for p in self._pods.values()
                if restart_attempt is None or restart_attempt_of(p) == restart_attempt]


# -- the record kept after the TTL deletes the objects ---------------------------------------------
def _conditions(obj: Obj | None) -> list[Obj]:
    keep = ("type", "status", "reason", "message", "lastTransitionTime")
    return [{k: c.get(k) for k in keep}
            for c in ((obj or {}).get("status") or {}).get("conditions") or []]


def _node_row(pod: Obj, pods_per_job: int) -> Obj:
    status = pod.get("status") or {}
    terms = [t for _, t in _terminations(pod)]
    last = max(terms, key=lambda t: str(t.get("finishedAt") or "")) if terms else {}
    running: Obj = next((cs["state"]["running"] for cs in status.get("containerStatuses") or []
                         if (cs.get("state") or {}).get("running")), {})
    return {"pod": (pod.get("metadata") or {}).get("name"), "node": node_index(pod, pods_per_job),
            "restart_attempt": restart_attempt_of(pod), "phase": status.get("phase"),
            "host": (pod.get("spec") or {}).get("nodeName"),
            "exit_code": last.get("exitCode"), "signal": signal_of(last.get("exitCode")),
            "reason": last.get("reason") or status.get("reason"),
            "started_at": last.get("startedAt") or running.get("startedAt"),
            "finished_at": last.get("finishedAt")}


def terminal_record(jobset: Obj, workload: Obj | None, pods: Iterable[Obj], *,
                    nproc_per_node: int = 1, pods_per_job: int = 1) -> Obj:
    """Everything worth keeping about a finished JobSet, as JSON-ready data: record it before
    ``ttlSecondsAfterFinished`` lets Kubernetes delete the JobSet, its Workload and pods."""
    pods = list(pods)
    state = gang_state(jobset, workload)
    meta, status = jobset.get("metadata") or {}, jobset.get("status") or {}
    end = condition(jobset, "Completed") if state.phase == "succeeded" else \
        condition(jobset, "Failed")
    first = [first_failing_rank(pods, r, nproc_per_node=nproc_per_node,
                                pods_per_job=pods_per_job) for r in range(state.restarts + 1)]
    record: Obj = {
        "jobset": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
        "phase": state.phase, "reason": state.reason, "restarts": state.restarts,
        "created_at": meta.get("creationTimestamp"),
        "finished_at": (end or {}).get("lastTransitionTime"),
        "conditions": _conditions(jobset),
        "replicated_jobs": list(status.get("replicatedJobsStatus") or []),
        "workload": None,
        "nodes": sorted((_node_row(p, pods_per_job) for p in pods),
                        key=lambda r: (r["restart_attempt"], r["node"] or 0, r["pod"] or "")),
        # why each attempt ended: the first failure of every attempt that had one
        "failures": [f.as_dict() for f in first if f is not None],
    }
    if workload is not None:
        wstatus = workload.get("status") or {}
        record["workload"] = {
            "name": (workload.get("metadata") or {}).get("name"),
            "cluster_queue": (wstatus.get("admission") or {}).get("clusterQueue"),
            "conditions": _conditions(workload),
            "evictions": list((wstatus.get("schedulingStats") or {}).get("evictions") or []),
            "requeues": (wstatus.get("requeueState") or {}).get("count") or 0,
        }
    return record
