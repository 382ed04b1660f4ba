"""The rules JobSet's and Kueue's webhooks and controllers enforce beyond any schema, on what
the compiler makes (every environment, including the longest names) and, through
`validate.check`, on manifests that break them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shoal._engines.kubernetes import names, validate
from shoal._engines.kubernetes.manifests import REPLICATED_JOB
from shoal.errors import SpecError
from tests.kubernetes.conftest import all_objects, every_manifest, seed_manifests


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return obj["spec"]["template"]


def _pretrain() -> dict[str, Any]:
    return copy.deepcopy(seed_manifests()["pretrain"][0])


# --- what the compiler makes --------------------------------------------------------------------

def test_the_longest_pod_names_fit_in_a_dns_label() -> None:
    manifests = every_manifest()
    for js in all_objects(manifests, "JobSet"):
        name = js["metadata"]["name"]
        assert names.is_dns1035_label(name)
        for rj in js["spec"]["replicatedJobs"]:
            completions = rj["template"]["spec"]["completions"]
            longest = names.longest_pod_name(name, rj["name"], rj["replicas"], completions)
            assert len(longest) <= 63, longest
    for job in all_objects(manifests, "Job"):
        assert len(job["metadata"]["name"] + names.POD_SUFFIX) <= 63
    # the edge cases really were at the edge: a 63-character environment, a 202-character run,
    # a 1000-node gang
    long_js = manifests["long"][0]
    assert long_js["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"] == 1000
    assert long_js["metadata"]["annotations"]["shoal.dev/run"].startswith("r-xxxxxxxx")
    assert len(names.longest_pod_name(long_js["metadata"]["name"], REPLICATED_JOB, 1,
                                      1000)) == 63


def test_shortened_names_stay_unique() -> None:
    base = ("env", "r-" + "x" * 80, "a0.1", "0")
    room = names.jobset_name_room(REPLICATED_JOB, 1, 8)
    a = names.dns1035_label(*base, room=room)
    b = names.dns1035_label(*base[:3], "1", room=room)
    c = names.dns1035_label("env", "r-" + "x" * 79 + "y", "a0.1", "0", room=room)
    assert len({a, b, c}) == 3 and all(len(n) <= room for n in (a, b, c))
    # separators that slug to the same text still give different names
    assert names.dns1035_label("my_env", "r") != names.dns1035_label("my-env", "r")
    assert names.dns1035_label("9lives").startswith("s-9lives-")


def test_failure_rule_names_are_valid() -> None:
    rules = [r for js in all_objects(every_manifest(), "JobSet")
             for r in js["spec"]["failurePolicy"].get("rules", [])]
    assert {r["name"] for r in rules} == {"resumeAfterPreemption", "timedOut"}
    for rule in rules:
        assert names.RULE_NAME.match(rule["name"]) and "-" not in rule["name"]
    assert names.rule_name("resume-after preemption") == "resumeAfterPreemption"
    assert names.rule_name("9", "lives") == "r9Lives"


def test_kueue_labels_are_on_the_jobset_and_not_in_its_pod_template() -> None:
    js = seed_manifests()["pretrain"][0]
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    assert js["spec"]["suspend"] is True
    for obj in (o for objs in every_manifest().values() for o in objs if "spec" in o):
        pod_labels = _pod(obj)["metadata"]["labels"]
        assert not any(k.startswith("kueue.x-k8s.io/") for k in pod_labels), obj["kind"]
        queued = "kueue.x-k8s.io/queue-name" in obj["metadata"]["labels"]
        assert obj["spec"].get("suspend", False) is queued


def test_gangs_are_indexed_all_or_nothing_jobs() -> None:
    for js in all_objects(every_manifest(), "JobSet"):
        (rj,) = js["spec"]["replicatedJobs"]
        job = rj["template"]["spec"]
        assert rj["replicas"] == 1
        assert job["completionMode"] == "Indexed"
        assert job["parallelism"] == job["completions"]
        assert job["backoffLimit"] == 0
        assert job["template"]["spec"]["restartPolicy"] == "Never"
        assert js["spec"]["failurePolicy"]["restartStrategy"] == "BlockingRecreate"
        if "podFailurePolicy" in job:
            assert job["template"]["spec"]["restartPolicy"] == "Never"


# --- validate.check on manifests that break a rule ----------------------------------------------

def _rejects(obj: dict[str, Any], *words: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        validate.check([obj])
    text = str(info.value)
    for word in words:
        assert word in text, text
    assert info.value.fix
    return info.value


def test_a_rule_name_with_a_hyphen_is_rejected() -> None:
    js = _pretrain()
    js["spec"]["failurePolicy"]["rules"][0]["name"] = "resume-after-preemption"
    _rejects(js, "rules[0].name", "resume-after-preemption", "no hyphens")


def test_duplicate_rule_names_unknown_targets_and_reasons_are_rejected() -> None:
    js = _pretrain()
    js["spec"]["failurePolicy"]["rules"][1]["name"] = "timedOut"
    _rejects(js, "unique")
    js = _pretrain()
    js["spec"]["failurePolicy"]["rules"][0]["targetReplicatedJobs"] = ["workers"]
    _rejects(js, "workers", "not a replicated job")
    js = _pretrain()
    js["spec"]["failurePolicy"]["rules"][0]["onJobFailureReasons"] = ["Evicted"]
    _rejects(js, "Evicted", "PodFailurePolicy")


def test_a_jobset_whose_pods_would_be_named_too_long_is_rejected() -> None:
    js = _pretrain()
    js["metadata"]["name"] = "p" * 50
    err = _rejects(js, "longest pod name", "at most 63")
    assert "shorten the name by" in (err.fix or "")


def test_a_jobset_name_must_be_a_dns1035_label() -> None:
    js = _pretrain()
    js["metadata"]["name"] = "4nodes"
    _rejects(js, "DNS-1035")


def test_a_queue_label_only_on_the_pod_template_is_rejected() -> None:
    js = _pretrain()
    del js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    _pod(js)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "research"
    _rejects(js, "Kueue reads kueue.x-k8s.io/queue-name from the JobSet's own metadata")


def test_a_queued_jobset_must_start_suspended() -> None:
    js = _pretrain()
    del js["spec"]["suspend"]
    _rejects(js, "suspend")


def test_a_pod_failure_policy_needs_restart_policy_never() -> None:
    js = _pretrain()
    _pod(js)["spec"]["restartPolicy"] = "OnFailure"
    _rejects(js, "restartPolicy", "OnFailure", "podFailurePolicy")


def test_completion_mode_must_be_one_of_the_two() -> None:
    js = _pretrain()
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = "indexed"
    _rejects(js, "completionMode", "Indexed, NonIndexed")


def test_a_job_with_a_too_long_name_is_rejected() -> None:
    job = copy.deepcopy(seed_manifests()["data"][0])
    job["metadata"]["name"] = "d" * 60
    _rejects(job, "hostname")
    job["metadata"]["name"] = "D" * 10
    _rejects(job, "DNS label")
