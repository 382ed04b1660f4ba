"""The controllers of a FAKE Kubernetes cluster, for tests only: the JobSet controller, Kueue,
KubeRay's RayJob controller and the kubelet, played by `FakeCluster`, a script that tests
drive step by step on top of `fake_apiserver.FakeApiServer` (no real API server, nor
controllers, nor a Ray cluster in pods, run on these machines).

It writes the same conditions, labels, statuses and exit codes the real controllers write
(kubernetes-sigs/jobset v1alpha2, kueue v1beta2, KubeRay's RayJob ray.io/v1), on the fake
server's clock, which moves one second per step — the resolution of Kubernetes timestamps.
Nothing happens on its own except what the real controllers do at once when a JobSet or a
RayJob is created (see `FakeCluster.created`).
"""

from __future__ import annotations

import contextlib
import copy
import random
import string
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kubernetes.fake_apiserver import FakeApiServer

Obj = dict[str, Any]

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
PROBE_OF = "shoal.dev/probe-of"


def set_condition(obj: Obj, type_: str, state: str, reason: str, message: str, now: str) -> None:
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conditions:
        if c["type"] == type_:
            if c["status"] != state:
                c["lastTransitionTime"] = now
            c.update(status=state, reason=reason, message=message)
            return
    conditions.append({"type": type_, "status": state, "reason": reason, "message": message,
                       "lastTransitionTime": now})


class FakeCluster:
    """The JobSet controller, Kueue and the kubelet, as a script a test drives.

    ``server.cluster = FakeCluster(server)`` makes JobSets created through the API get their
    Suspended condition and (with a queue-name label) a pending Kueue Workload, as the real
    controllers do on their own. Everything after that happens when the test says so:
    `admit`, `fail_node`, `lose_node`, `restart`, `evict`, `requeue`, `succeed`, `fail`,
    `expire`; for a RayJob (KubeRay's controller, no Ray cluster: none can start here),
    `ray_admit`, `ray_run`, `ray_end`; and, for an elastic gang's capacity probe (a plain
    suspended Job, which Kueue's job integration admits as a workload of its own), `probe`
    and `admit_probe`.
    """

    def __init__(self, server: FakeApiServer) -> None:
        self.s = server
        server.cluster = self  # type: ignore[attr-defined]
        self.pending_message = ("couldn't assign flavors to pod set node: insufficient unused "
                                "quota for nvidia.com/gpu in flavor h200, 16 more needed")

    # -- reactions to API calls ----------------------------------------------------------------
    def created(self, plural: str, obj: Obj) -> None:
        if plural == "rayjobs":
            self._rayjob_created(obj)
            return
        if plural != "jobsets":
            return
        now = self.s.now()
        if obj["spec"].get("suspend"):
            set_condition(obj, "Suspended", "True", "SuspendedJobs", "jobset is suspended", now)
        obj.setdefault("status", {}).update(
            restarts=0, replicatedJobsStatus=self._rj_status(obj, "suspended"))
        self.s.put("jobsets", obj)
        queue = (obj["metadata"].get("labels") or {}).get(QUEUE_NAME)
        if queue:
            self._create_workload(obj, queue)

    # -- KubeRay's RayJob controller (and Kueue's admission of a RayJob) ------------------------
    # KubeRay v1 writes status.jobDeploymentStatus (its lifecycle of cluster and submitter)
    # and status.jobStatus (the Ray job's, from the dashboard); a queued RayJob waits
    # Suspended until Kueue sets spec.suspend to false.
    def _rayjob_created(self, obj: Obj) -> None:
        suspended = bool(obj["spec"].get("suspend"))
        obj["status"] = {"jobDeploymentStatus": "Suspended" if suspended else "Initializing"}
        self.s.put("rayjobs", obj)

    def rayjob(self, name: str, ns: str = "default") -> Obj:
        job = self.s.get("rayjobs", name, ns)
        assert job is not None, f"no RayJob {name}"
        return job

    def ray_admit(self, name: str, ns: str = "default") -> None:
        """Kueue admits the RayJob: unsuspended, KubeRay starts creating its cluster."""
        self.s.tick()
        job = self.rayjob(name, ns)
        job["spec"]["suspend"] = False
        job["status"]["jobDeploymentStatus"] = "Initializing"
        self.s.put("rayjobs", job)

    def ray_run(self, name: str, ns: str = "default") -> None:
        """The cluster is ready and the submitter's ``ray job submit`` started the job."""
        now = self.s.tick()
        job = self.rayjob(name, ns)
        cluster = f"{name}-{''.join(random.choices(string.ascii_lowercase, k=5))}"
        job["status"].update(jobDeploymentStatus="Running", jobStatus="RUNNING",
                             rayClusterName=cluster, jobId=f"{name}-job",
                             dashboardURL=f"{cluster}-head-svc.{ns}.svc.cluster.local:8265",
                             startTime=now)
        self.s.put("rayjobs", job)

    def ray_end(self, name: str, job_status: str = "SUCCEEDED", *, reason: str = "",
                message: str = "", ns: str = "default") -> None:
        """The Ray job ended (``job_status``) or, with a ``reason`` and no job status, the
        deployment failed (DeadlineExceeded, SubmissionFailed...); the RayJob is then Complete
        or Failed, as KubeRay marks it, and (shutdownAfterJobFinishes) its cluster goes."""
        now = self.s.tick()
        job = self.rayjob(name, ns)
        status = job["status"]
        if job_status:
            status["jobStatus"] = job_status
        if job_status == "FAILED" and not reason:
            reason, message = "AppFailed", f"the Ray job {name}-job failed"
        status["jobDeploymentStatus"] = ("Complete" if job_status == "SUCCEEDED" and not reason
                                         else "Failed")
        if reason:
            status.update(reason=reason, message=message)
        status["endTime"] = now
        self.s.put("rayjobs", job)

    # -- lookups -------------------------------------------------------------------------------
    def jobset(self, name: str, ns: str = "default") -> Obj:
        js = self.s.get("jobsets", name, ns)
        assert js is not None, f"no JobSet {name}"
        return js

    def workload(self, name: str, ns: str = "default") -> Obj:
        uid = self.jobset(name, ns)["metadata"]["uid"]
        for w in self.s.all("workloads", ns):
            if any(r["uid"] == uid for r in w["metadata"].get("ownerReferences", [])):
                return w
        raise AssertionError(f"no Workload for JobSet {name}")

    def pods(self, name: str, attempt: int | None = None, ns: str = "default") -> list[Obj]:
        selector = f"{JOBSET_NAME}={name}" + (
            f",{RESTART_ATTEMPT}={attempt}" if attempt is not None else "")
        return sorted(self.s.all("pods", ns, selector),
                      key=lambda p: int(p["metadata"]["labels"][COMPLETION_INDEX]))

    def node_pod(self, name: str, node: int, ns: str = "default") -> Obj:
        attempt = self.jobset(name, ns)["status"].get("restarts", 0)
        return next(p for p in self.pods(name, attempt, ns)
                    if int(p["metadata"]["labels"][COMPLETION_INDEX]) == node
                    and p["status"]["phase"] in ("Running", "Pending", "Failed"))

    def probe(self, jobset: str, ns: str = "default") -> Obj | None:
        """The capacity probe Job asking for a node more for ``jobset``, if there is one."""
        found = self.s.all("jobs", ns, f"{PROBE_OF}={jobset}")
        return found[0] if found else None

    # -- Kueue ---------------------------------------------------------------------------------
    def admit_probe(self, jobset: str, ns: str = "default") -> Obj:
        """Kueue admits the probe of ``jobset`` (quota for one node is free): the Job is
        unsuspended, the Job controller makes its one pod and the scheduler binds it (Running,
        PodScheduled). Returns the probe. (No Workload is written for it: the engine reads
        the Job's ``spec.suspend`` and its pod, not the probe's Workload.)"""
        now = self.s.tick()
        job = self.probe(jobset, ns)
        assert job is not None, f"no probe for JobSet {jobset}"
        job["spec"]["suspend"] = False
        set_condition(job, "Suspended", "False", "JobResumed", "Job resumed", now)
        job = self.s.put("jobs", job)
        name = job["metadata"]["name"]
        spec = copy.deepcopy(job["spec"]["template"]["spec"])
        self.s.put("pods", {"metadata": {
            "name": f"{name}-probe1", "namespace": ns,
            "labels": {**job["spec"]["template"]["metadata"]["labels"],
                       "batch.kubernetes.io/job-name": name},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                 "uid": job["metadata"]["uid"], "controller": True,
                                 "blockOwnerDeletion": True}]},
            "spec": {**spec, "nodeName": "gpu-node-9"},
            "status": {"phase": "Running", "startTime": now, "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}]}}, "ADDED")
        return job

    def _create_workload(self, js: Obj, queue: str) -> None:
        meta = js["metadata"]
        pod_sets = [{"name": rj["name"], "count": rj.get("replicas", 1) * rj["template"]["spec"]
                     .get("parallelism", 1)} for rj in js["spec"]["replicatedJobs"]]
        wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {
            "name": f"jobset-{meta['name']}-{meta['uid'][:5]}", "namespace": meta["namespace"],
            "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                 "name": meta["name"], "uid": meta["uid"], "controller": True,
                                 "blockOwnerDeletion": True}]},
            "spec": {"queueName": queue, "podSets": pod_sets, "priority": 0, "active": True},
            "status": {}}
        set_condition(wl, "QuotaReserved", "False", "Pending", self.pending_message,
                      self.s.now())
        self.s.put("workloads", wl, "ADDED")

    def admit(self, name: str, cluster_queue: str = "team-a", ns: str = "default") -> None:
        """Kueue reserves quota and admits; the JobSet resumes; one Running pod per node."""
        now = self.s.tick()
        wl = self.workload(name, ns)
        wl["status"]["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [
            {"name": ps["name"], "count": ps["count"], "flavors": {"nvidia.com/gpu": "h200"}}
            for ps in wl["spec"]["podSets"]]}
        set_condition(wl, "QuotaReserved", "True", "QuotaReserved",
                      f"Quota reserved in ClusterQueue {cluster_queue}", now)
        set_condition(wl, "Admitted", "True", "Admitted", "The workload is admitted", now)
        for c in wl["status"]["conditions"]:
            if c["type"] in ("Evicted", "Preempted") and c["status"] == "True":
                c.update(status="False", reason="QuotaReserved",
                         message="Previously: " + c["message"], lastTransitionTime=now)
        self.s.put("workloads", wl)
        js = self.jobset(name, ns)
        js["spec"]["suspend"] = False
        set_condition(js, "Suspended", "False", "ResumeJobs", "jobset is resumed", now)
        self.s.put("jobsets", js)
        self._start_pods(name, ns)

    def evict(self, name: str, ns: str = "default") -> None:
        """Kueue preempts the workload for a higher-priority one: Evicted (reason Preempted),
        the JobSet is suspended, its pods are stopped (SIGTERM) and deleted."""
        now = self.s.tick()
        wl = self.workload(name, ns)
        message = ("Preempted to accommodate a workload (UID: 5f1c, JobUID: 9a2e) due to "
                   "prioritization in the ClusterQueue")
        set_condition(wl, "Evicted", "True", "Preempted", message, now)
        set_condition(wl, "Preempted", "True", "InClusterQueue", message, now)
        stats = wl["status"].setdefault("schedulingStats", {"evictions": []})
        stats["evictions"] = [{"reason": "Preempted", "underlyingCause": "InClusterQueue",
                               "count": 1 + sum(e["count"] for e in stats["evictions"])}]
        self.s.put("workloads", wl)
        js = self.jobset(name, ns)
        js["spec"]["suspend"] = True
        set_condition(js, "Suspended", "True", "SuspendedJobs", "jobset is suspended", now)
        js["status"]["replicatedJobsStatus"] = self._rj_status(js, "suspended")
        self.s.put("jobsets", js)
        for pod in self.pods(name, ns=ns):
            if pod["status"]["phase"] == "Running":
                self.s.append_log(ns, pod["metadata"]["name"], self._container(pod),
                                  "SIGTERM: preempted, saving a checkpoint")
                self.s._stop_pod("pods", pod)
                self.s.remove("pods", pod["metadata"]["name"], ns)

    def requeue(self, name: str, ns: str = "default", message: str | None = None) -> None:
        """Kueue, once the pods are gone, releases the quota and queues the workload again."""
        now = self.s.tick()
        wl = self.workload(name, ns)
        wl["status"].pop("admission", None)
        set_condition(wl, "QuotaReserved", "False", "Pending",
                      message or self.pending_message, now)
        set_condition(wl, "Admitted", "False", "NoReservation",
                      "The workload has no reservation", now)
        set_condition(wl, "Requeued", "True", "Preempted", "Preempted", now)
        self.s.put("workloads", wl)

    # -- the JobSet controller and the kubelet ---------------------------------------------------
    def _rj_status(self, js: Obj, jobs: str = "none") -> list[Obj]:
        """replicatedJobsStatus with every Job ``ready``, ``succeeded``, ``suspended`` or not
        started yet (``none``)."""
        rows = []
        for rj in js["spec"]["replicatedJobs"]:
            n = rj.get("replicas", 1)
            rows.append({"name": rj["name"], "ready": n if jobs == "ready" else 0,
                         "succeeded": n if jobs == "succeeded" else 0, "failed": 0,
                         "active": n if jobs == "ready" else 0,
                         "suspended": n if jobs == "suspended" else 0})
        return rows

    def _container(self, pod: Obj) -> str:
        return str(pod["spec"]["containers"][0]["name"])

    def _start_pods(self, name: str, ns: str) -> None:
        js = self.jobset(name, ns)
        attempt = js["status"].get("restarts", 0)
        now = self.s.now()
        global_index = 0
        for rj in js["spec"]["replicatedJobs"]:
            job_spec = rj["template"]["spec"]
            pod_spec = copy.deepcopy(job_spec.get("template", {}).get("spec") or {})
            pod_spec.setdefault("containers", [{"name": "node", "image": "shoal:test"}])
            for job_index in range(rj.get("replicas", 1)):
                job_name = f"{name}-{rj['name']}-{job_index}"
                job = self.s.get("jobs", job_name, ns)
                if job is None or job["metadata"]["labels"][RESTART_ATTEMPT] != str(attempt):
                    if job is not None:
                        self.s.remove("jobs", job_name, ns)
                    job = self.s.put("jobs", {"metadata": {
                        "name": job_name, "namespace": ns,
                        "labels": {JOBSET_NAME: name, REPLICATED_JOB: rj["name"],
                                   JOB_INDEX: str(job_index), RESTART_ATTEMPT: str(attempt)},
                        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                             "kind": "JobSet", "name": name,
                                             "uid": js["metadata"]["uid"], "controller": True,
                                             "blockOwnerDeletion": True}]},
                        "spec": copy.deepcopy(job_spec), "status": {"active": 0}}, "ADDED")
                for index in range(job_spec.get("parallelism", 1)):
                    node = job_index * job_spec.get("parallelism", 1) + index
                    labels = {JOBSET_NAME: name, REPLICATED_JOB: rj["name"],
                              JOB_INDEX: str(job_index), GLOBAL_INDEX: str(global_index),
                              RESTART_ATTEMPT: str(attempt), COMPLETION_INDEX: str(index),
                              "batch.kubernetes.io/job-name": job_name,
                              "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
                    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
                    pod = {"metadata": {
                        "name": f"{job_name}-{index}-{suffix}", "namespace": ns,
                        "labels": labels, "annotations": dict(labels),
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                             "name": job_name, "uid": job["metadata"]["uid"],
                                             "controller": True, "blockOwnerDeletion": True}]},
                        "spec": {**copy.deepcopy(pod_spec), "nodeName": f"gpu-node-{node}",
                                 "hostname": f"{job_name}-{index}", "subdomain": name},
                        "status": {"phase": "Running", "startTime": now,
                                   "podIP": f"10.0.{attempt}.{node + 10}",
                                   "conditions": [{"type": "Ready", "status": "True"}],
                                   "containerStatuses": [
                                       {"name": c["name"], "ready": True, "restartCount": 0,
                                        "image": c.get("image", ""),
                                        "state": {"running": {"startedAt": now}}}
                                       for c in pod_spec["containers"]]}}
                    pod = self.s.put("pods", pod, "ADDED")
                    self.s.append_log(ns, pod["metadata"]["name"], self._container(pod),
                                      f"shoal-node {node}: restart attempt {attempt}, "
                                      f"on gpu-node-{node}",
                                      f"node {node}: step 1")
                global_index += 1
        js["status"]["replicatedJobsStatus"] = self._rj_status(js, "ready")
        self.s.put("jobsets", js)

    def fail_node(self, name: str, node: int, exit_code: int = 137, reason: str = "Error",
                  ns: str = "default", last_words: str | None = None) -> Obj:
        """The container of ``node`` ends with ``exit_code`` (137: SIGKILL, e.g. a kernel OOM
        kill or a dead GPU); its pod fails. Returns the pod."""
        finished = self.s.tick()
        pod = self.node_pod(name, node, ns)
        container = self._container(pod)
        self.s.append_log(ns, pod["metadata"]["name"], container,
                          last_words or f"node {node}: CUDA error: an illegal memory access")
        for cs in pod["status"]["containerStatuses"]:
            started = cs["state"]["running"]["startedAt"]
            cs["state"] = {"terminated": {"exitCode": exit_code, "reason": reason,
                                          "startedAt": started, "finishedAt": finished}}
            cs["ready"] = False
        pod["status"]["phase"] = "Failed"
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        return self.s.put("pods", pod)

    def lose_node(self, name: str, node: int, ns: str = "default") -> Obj:
        """The host of ``node`` is gone (NotReady, then tainted): the taint manager marks its
        pod DisruptionTarget (reason DeletionByTaintManager) and deletes it; its container is
        stopped and the pod removed. Returns the pod as last seen. (The Job controller would
        then fail the node's Job; the test says so with `fail` if it matters.)"""
        now = self.s.tick()
        pod = self.node_pod(name, node, ns)
        pod["status"]["conditions"] = [
            {"type": "Ready", "status": "False", "lastTransitionTime": now},
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
             "message": f"Taint manager: deleting due to NoExecute taint key "
                        f"node.kubernetes.io/unreachable on gpu-node-{node}",
             "lastTransitionTime": now}]
        pod = self.s.put("pods", pod)
        self.s._stop_pod("pods", pod)
        return self.s.remove("pods", pod["metadata"]["name"], ns) or pod

    def restart(self, name: str, ns: str = "default") -> None:
        """The JobSet controller's failure policy: restarts + 1, the attempt's Jobs deleted
        (their pods stopped and gone: BlockingRecreate), new Jobs and pods for the next."""
        self.s.tick()
        js = self.jobset(name, ns)
        old = js["status"].get("restarts", 0)
        js["status"]["restarts"] = old + 1
        js["status"]["restartsCountTowardsMax"] = old + 1
        js["status"]["replicatedJobsStatus"] = self._rj_status(js)
        self.s.put("jobsets", js)
        for job in self.s.all("jobs", ns, f"{JOBSET_NAME}={name},{RESTART_ATTEMPT}={old}"):
            self.s.collect("jobs", job, "Foreground")
        self.s.tick()
        self._start_pods(name, ns)

    def succeed(self, name: str, ns: str = "default") -> None:
        """Every node's container exits 0: the JobSet completes, Kueue finishes the Workload."""
        now = self.s.tick()
        js = self.jobset(name, ns)
        for pod in self.pods(name, js["status"].get("restarts", 0), ns):
            if pod["status"]["phase"] != "Running":
                continue
            self.s.append_log(ns, pod["metadata"]["name"], self._container(pod),
                              "training done")
            for cs in pod["status"]["containerStatuses"]:
                cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed",
                                              "startedAt": cs["state"]["running"]["startedAt"],
                                              "finishedAt": now}}
                cs["ready"] = False
            pod["status"]["phase"] = "Succeeded"
            self.s.put("pods", pod)
        js["status"]["replicatedJobsStatus"] = self._rj_status(js, "succeeded")
        js["status"]["terminalState"] = "Completed"
        set_condition(js, "Completed", "True", "AllJobsCompleted",
                      "jobset completed successfully", now)
        self.s.put("jobsets", js)
        self._finish(name, ns, "Succeeded", "jobset completed successfully", now)

    def fail(self, name: str, ns: str = "default", reason: str = "ReachedMaxRestarts",
             message: str = "jobset failed due to reaching max number of restarts") -> None:
        now = self.s.tick()
        js = self.jobset(name, ns)
        js["status"]["terminalState"] = "Failed"
        set_condition(js, "Failed", "True", reason, message, now)
        self.s.put("jobsets", js)
        self._finish(name, ns, "Failed", message, now)

    def _finish(self, name: str, ns: str, reason: str, message: str, now: str) -> None:
        with contextlib.suppress(AssertionError):
            wl = self.workload(name, ns)
            set_condition(wl, "Finished", "True", reason, message, now)
            self.s.put("workloads", wl)

    def expire(self, name: str, ns: str = "default") -> None:
        """ttlSecondsAfterFinished ran out: the JobSet and everything it owns are deleted."""
        self.s.tick()
        self.s.collect("jobsets", self.jobset(name, ns), "Background")
