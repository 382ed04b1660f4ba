"""Which pods of an elastic start count as a lost node (the gang goes on without it) rather
than as a rank failure (it restarts at the same size): `status.lost_reason` and `lost_nodes`,
by value."""

from __future__ import annotations

from typing import Any

from shoal._engines.kubernetes.status import deleted_before, lost_nodes, lost_reason

Obj = dict[str, Any]


def pod(node: int, *, phase: str = "Running", exit_code: int | None = None,
        disrupted: bool = False, deleting: bool = False, attempt: int = 0) -> Obj:
    state: Obj = ({"running": {"startedAt": "2026-12-04T02:00:00Z"}} if exit_code is None else
                  {"terminated": {"exitCode": exit_code, "reason": "Error",
                                  "startedAt": "2026-12-04T02:00:00Z",
                                  "finishedAt": "2026-12-04T02:00:10Z"}})
    meta: Obj = {"name": f"gang-node-0-{node}-x", "uid": f"uid-{node}-{attempt}",
                 "labels": {"batch.kubernetes.io/job-completion-index": str(node),
                            "jobset.sigs.k8s.io/restart-attempt": str(attempt)}}
    if deleting:  # asked to stop at 02:00:05 with 30 s of grace: ended after that
        meta.update(deletionTimestamp="2026-12-04T02:00:35Z", deletionGracePeriodSeconds=30)
    conditions = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                   "message": "Eviction API: evicting"}] if disrupted else []
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions,
                                         "containerStatuses": [{"name": "primary",
                                                                "state": state}]}}


def test_a_disrupted_or_deleted_pod_is_a_lost_node() -> None:
    assert lost_reason(pod(1, disrupted=True)) == (
        "pod gang-node-0-1-x was disrupted (EvictionByEvictionAPI: Eviction API: evicting)")
    assert lost_reason(pod(1), deleted=True) == "pod gang-node-0-1-x was deleted while the gang ran"
    assert lost_reason(pod(1, phase="Succeeded"), deleted=True) is None  # it had finished


def test_a_pod_whose_node_stopped_answering_is_a_lost_node() -> None:
    assert lost_reason(pod(2, phase="Unknown")) == (
        "pod gang-node-0-2-x's node stopped answering (phase Unknown)")


def test_a_pod_that_never_ran_its_container_is_a_lost_node() -> None:
    p = pod(0, phase="Failed")
    p["status"].update(containerStatuses=[], reason="Evicted")
    assert lost_reason(p) == "pod gang-node-0-0-x failed before its container ran (Evicted)"


def test_a_failed_container_is_lost_only_when_nothing_reported() -> None:
    failed = pod(1, phase="Failed", exit_code=137)
    assert lost_reason(failed) is None  # reports not read: undecided, not lost
    assert lost_reason(failed, reported=True) is None  # its launcher said: a rank failure
    assert lost_reason(failed, reported=False) == (
        "pod gang-node-0-1-x ended (SIGKILL) without a report from its launcher")
    # stopped because its pod was being deleted (a consequence, e.g. the JobSet failing)
    assert lost_reason(pod(1, phase="Failed", exit_code=143, deleting=True),
                       reported=False) is None


def test_lost_nodes_of_one_start() -> None:
    pods = [pod(0, phase="Failed", exit_code=1), pod(1, phase="Failed", exit_code=137),
            pod(2, disrupted=True), pod(3), pod(1, disrupted=True, attempt=1)]
    assert lost_nodes(pods, 0, reported={0}) == {
        1: "pod gang-node-0-1-x ended (SIGKILL) without a report from its launcher",
        2: "pod gang-node-0-2-x was disrupted (EvictionByEvictionAPI: Eviction API: evicting)"}
    assert lost_nodes(pods, 0, deleted={"uid-3-0"}) == {
        2: "pod gang-node-0-2-x was disrupted (EvictionByEvictionAPI: Eviction API: evicting)",
        3: "pod gang-node-0-3-x was deleted while the gang ran"}
    assert list(lost_nodes(pods, 1)) == [1]


def test_a_deletion_asked_before_the_jobset_failed_was_while_the_gang_ran() -> None:
    deleted = pod(1, phase="Failed", exit_code=143, deleting=True)  # asked at 02:00:05
    pods = [pod(0, phase="Failed", exit_code=1), deleted]
    assert deleted_before(pods, "2026-12-04T02:00:09Z") == {"uid-1-0"}
    assert deleted_before(pods, "2026-12-04T02:00:05Z") == set()  # the same second: after
    assert deleted_before(pods, None) == set()
