"""The rules the JobSet and Kueue webhooks and controllers enforce that no schema catches.

A manifest that breaks one of them is accepted by ``kubectl apply --dry-run=client`` and then
rejected by the API server, or worse, accepted and never run (Kueue ignores a queue label on the
pod template; a JobSet whose pod names are too long has pods that can never be created). The
compiler checks its own output with `check` before anyone sees it; each failure is a
`SpecError` naming the rule, the value and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shoal._engines.kubernetes.names import (
    DNS_LABEL_MAX,
    RULE_NAME,
    RULE_NAME_MAX,
    is_dns1035_label,
    is_dns1123_label,
    longest_pod_name,
)
from shoal.errors import SpecError

__all__ = ["COMPLETION_MODES", "JOB_FAILURE_REASONS", "KUEUE_LABELS", "KUEUE_RAY_WORKER_GROUPS",
           "RAYJOB_NAME_MAX", "check"]

COMPLETION_MODES = ("Indexed", "NonIndexed")
# The Job failure reasons JobSet's failure-policy rules may name (its webhook's list).
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                       "MaxFailedIndexesExceeded", "PodFailurePolicy")
# Kueue reads these from the workload object's own labels, never from its pod template.
KUEUE_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class")
# KubeRay names a RayJob's RayCluster <rayjob>-<5 random>, at most 53 characters.
RAYJOB_NAME_MAX = 47
# Kueue's RayJob webhook: a workload has at most 8 pod sets, one of them the head's.
KUEUE_RAY_WORKER_GROUPS = 7


def check(objects: Iterable[Mapping[str, Any]]) -> None:
    """Raise `SpecError` for the first webhook rule an object breaks."""
    for obj in objects:
        kind = obj.get("kind")
        if kind == "JobSet":
            check_jobset(obj)
        elif kind == "Job":
            check_job(obj)
        elif kind == "RayJob":
            check_rayjob(obj)


def _error(where: str, value: object, rule: str, fix: str) -> SpecError:
    return SpecError(where, value, rule, fix)


def _kueue_on_metadata(kind: str, obj: Mapping[str, Any],
                       pod_templates: list[Mapping[str, Any]]) -> None:
    meta = obj.get("metadata", {})
    own = meta.get("labels") or {}
    for template in pod_templates:
        labels = (template.get("metadata") or {}).get("labels") or {}
        for key in KUEUE_LABELS:
            if key in labels and own.get(key) != labels[key]:
                raise _error(f"{kind} {meta.get('name')!r} pod template label {key}",
                             labels[key], f"Kueue reads {key} from the {kind}'s own metadata "
                             "and ignores it on the pod template",
                             f"put {key}={labels[key]} in the {kind}'s metadata.labels")
    if any(key in own for key in KUEUE_LABELS) and obj.get("spec", {}).get("suspend") is not True:
        raise _error(f"{kind} {meta.get('name')!r} spec.suspend", obj["spec"].get("suspend"),
                     "a job queued by Kueue must be created suspended (Kueue unsuspends it on "
                     "admission; otherwise it starts before it is admitted)",
                     "set spec.suspend: true")


def _check_job_spec(where: str, spec: Mapping[str, Any]) -> None:
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in COMPLETION_MODES:
        raise _error(f"{where}.completionMode", mode,
                     f"must be one of {', '.join(COMPLETION_MODES)} (the CRD types it as any "
                     "string)", 'use completionMode: "Indexed"')
    policy = (spec.get("template", {}).get("spec") or {}).get("restartPolicy")
    if spec.get("podFailurePolicy") is not None and policy != "Never":
        raise _error(f"{where}.template.spec.restartPolicy", policy,
                     "a Job with a podFailurePolicy needs restartPolicy Never",
                     'set restartPolicy: "Never"')


def check_job(job: Mapping[str, Any]) -> None:
    name = job.get("metadata", {}).get("name", "")
    where = f"Job {name!r}"
    if not is_dns1123_label(name):
        raise _error(f"{where} metadata.name", name, "a Job name must be a DNS label (a-z, "
                     "0-9, '-', at most 63)", "shorten it with names.dns1035_label")
    spec = job.get("spec", {})
    _check_job_spec(f"{where} spec", spec)
    if spec.get("completionMode") == "Indexed":
        longest = f"{name}-{int(spec.get('completions', 1)) - 1}-xxxxx"
    else:
        longest = f"{name}-xxxxx"
    if len(longest) > DNS_LABEL_MAX:
        raise _error(f"{where} metadata.name", name, f"its pods would be named like "
                     f"{longest!r} ({len(longest)} characters): a pod's hostname is at most "
                     f"{DNS_LABEL_MAX}", "shorten the Job name")
    _kueue_on_metadata("Job", job, [spec.get("template", {})])


def check_jobset(jobset: Mapping[str, Any]) -> None:
    name = jobset.get("metadata", {}).get("name", "")
    where = f"JobSet {name!r}"
    if not is_dns1035_label(name):
        raise _error(f"{where} metadata.name", name, "a JobSet name must be a DNS-1035 label "
                     "(it names a Service): a-z, 0-9, '-', starting with a letter, at most 63",
                     "shorten it with names.dns1035_label")
    spec = jobset.get("spec", {})
    subdomain = (spec.get("network") or {}).get("subdomain")
    if subdomain is not None and not is_dns1035_label(subdomain):
        raise _error(f"{where} spec.network.subdomain", subdomain, "names the headless Service: "
                     "a DNS-1035 label", "leave it out (it defaults to the JobSet's name)")
    replicated = spec.get("replicatedJobs") or []
    names = [rj.get("name", "") for rj in replicated]
    for rj in replicated:
        rj_where = f"{where} replicatedJobs[{rj.get('name')!r}]"
        replicas = int(rj.get("replicas", 1))
        job_spec = rj.get("template", {}).get("spec", {})
        longest_job = f"{name}-{rj.get('name')}-{replicas - 1}"
        if not is_dns1035_label(longest_job):
            raise _error(f"{rj_where}", longest_job, "the Job names JobSet makes must be "
                         "DNS-1035 labels", "shorten the JobSet or replicated job name")
        group = rj.get("groupName", "default")
        if not is_dns1035_label(group):
            raise _error(f"{rj_where}.groupName", group, "must be a DNS-1035 label",
                         "leave it out")
        _check_job_spec(f"{rj_where}.template.spec", job_spec)
        if job_spec.get("completionMode") == "Indexed" and "completions" in job_spec:
            longest = longest_pod_name(name, rj.get("name", ""), replicas,
                                       int(job_spec["completions"]))
            if len(longest) > DNS_LABEL_MAX:
                raise _error(f"{where} metadata.name", name,
                             f"the longest pod name JobSet would make, {longest!r}, has "
                             f"{len(longest)} characters; at most {DNS_LABEL_MAX} are allowed",
                             f"shorten the name by {len(longest) - DNS_LABEL_MAX} characters")
    _check_failure_policy(where, spec.get("failurePolicy") or {}, names)
    _kueue_on_metadata("JobSet", jobset,
                       [rj.get("template", {}).get("spec", {}).get("template", {})
                        for rj in replicated])


def _check_failure_policy(where: str, policy: Mapping[str, Any], jobs: list[str]) -> None:
    seen: set[str] = set()
    for i, rule in enumerate(policy.get("rules") or []):
        rule_where = f"{where} spec.failurePolicy.rules[{i}]"
        name = rule.get("name", "")
        if not (1 <= len(name) <= RULE_NAME_MAX) or not RULE_NAME.match(name):
            raise _error(f"{rule_where}.name", name, f"must match {RULE_NAME.pattern} and "
                         f"be 1-{RULE_NAME_MAX} characters (no hyphens)",
                         "use names.rule_name(...), e.g. 'resumeAfterPreemption'")
        if name in seen:
            raise _error(f"{rule_where}.name", name, "rule names must be unique",
                         "give each rule its own name")
        seen.add(name)
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in jobs:
                raise _error(f"{rule_where}.targetReplicatedJobs", target,
                             f"is not a replicated job of this JobSet ({', '.join(jobs)})",
                             "name one of them, or leave the list empty for all")
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in JOB_FAILURE_REASONS:
                raise _error(f"{rule_where}.onJobFailureReasons", reason,
                             "is not a Job failure reason JobSet recognises",
                             f"use one of {', '.join(JOB_FAILURE_REASONS)}")


def check_rayjob(job: Mapping[str, Any]) -> None:
    """KubeRay's RayJob validation and, when queued, Kueue's RayJob webhook."""
    name = job.get("metadata", {}).get("name", "")
    where = f"RayJob {name!r}"
    if not is_dns1035_label(name) or len(name) > RAYJOB_NAME_MAX:
        raise _error(f"{where} metadata.name", name, f"a RayJob name must be a DNS-1035 label "
                     f"of at most {RAYJOB_NAME_MAX} characters (KubeRay names its RayCluster "
                     "after it, plus 6)", "shorten it with names.dns1035_label")
    spec = job.get("spec", {})
    cluster = spec.get("rayClusterSpec") or {}
    head = cluster.get("headGroupSpec") or {}
    groups = cluster.get("workerGroupSpecs") or []
    if not (head.get("template", {}).get("spec") or {}).get("containers"):
        raise _error(f"{where} spec.rayClusterSpec.headGroupSpec", head, "the head needs a "
                     "container", "give the head's pod template a container")
    seen: set[str] = set()
    for i, g in enumerate(groups):
        gname = g.get("groupName", "")
        g_where = f"{where} spec.rayClusterSpec.workerGroupSpecs[{i}]"
        if not is_dns1123_label(gname) or gname in seen:
            raise _error(f"{g_where}.groupName", gname, "must be a unique DNS label",
                         "rename the worker group")
        seen.add(gname)
        low, high = g.get("minReplicas"), g.get("maxReplicas")
        if low is None or high is None or not 0 <= low <= high:
            raise _error(f"{g_where}.minReplicas", (low, high), "KubeRay needs 0 <= "
                         "minReplicas <= maxReplicas", "set min_replicas <= max_replicas")
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        raise _error(f"{where} spec.shutdownAfterJobFinishes", False, "KubeRay refuses to "
                     "suspend a RayJob that keeps its cluster after the job (kuberay#1813)",
                     "set shutdownAfterJobFinishes: true")
    pods = [head.get("template", {})] + [g.get("template", {}) for g in groups]
    _kueue_on_metadata("RayJob", job, pods)
    if not any(k in (job.get("metadata", {}).get("labels") or {}) for k in KUEUE_LABELS):
        return
    if cluster.get("enableInTreeAutoscaling"):
        raise _error(f"{where} spec.rayClusterSpec.enableInTreeAutoscaling", True,
                     "Kueue admits a RayJob at a fixed size: its webhook refuses autoscaling",
                     "set enable_autoscaling=False, or leave the Kueue queue out")
    if len(groups) > KUEUE_RAY_WORKER_GROUPS:
        raise _error(f"{where} spec.rayClusterSpec.workerGroupSpecs", len(groups),
                     f"Kueue admits at most {KUEUE_RAY_WORKER_GROUPS} worker groups (8 pod "
                     "sets, one the head's)", "merge worker groups")
    if "head" in seen:
        raise _error(f"{where} spec.rayClusterSpec.workerGroupSpecs", "head",
                     "Kueue reserves the pod set name 'head' for the head group",
                     "rename the worker group")
