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

__all__ = ["COMPLETION_MODES", "JOB_FAILURE_REASONS", "KUEUE_LABELS", "check"]

COMPLETION_MODES = ("Indexed", "NonIndexed")
# The Job failure reasons JobSet's failure-policy rules may name (its webhook's list).
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                       "MaxFailedIndexesExceeded", "PodFailurePolicy")
# Kueue reads these from the workload object's own labels, never from its pod template.
KUEUE_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class")


def check(objects: Iterable[Mapping[str, Any]]) -> None:
    """Raise `SpecError` for the first webhook rule an object breaks."""
    for obj in objects:
        kind = obj.get("kind")
        if kind == "JobSet":
            check_jobset(obj)
        elif kind == "Job":
            check_job(obj)


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
