"""A Ray environment's call compiled to a KubeRay RayJob: whole manifests against files kept in
``golden/``, against the RayJob CRD's own schema (vendored in ``crds/``, closed wherever it
declares properties), each group's pod template against Kubernetes' Pod schema, and the
KubeRay and Kueue webhook rules `validate.check_rayjob` encodes. No cluster is needed.

Rewrite the golden files after an intended change with ``SHOAL_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from shoal import _contract as contract
from shoal._engines.kubernetes import compile_call, to_yaml
from shoal._engines.kubernetes.engine import KubernetesEngine
from shoal._engines.kubernetes.validate import check_rayjob
from shoal.errors import SpecError
from tests.kubernetes import ray_program as rp
from tests.kubernetes.conftest import CODE, CONFIG, RUN, call_of

GOLDEN = Path(__file__).parent / "golden"
RAYJOB_SCHEMA = Path(__file__).parent / "crds" / "ray.io_rayjobs.v1.schema.json"
UPDATE = os.environ.get("SHOAL_UPDATE_GOLDEN") == "1"
TASKS = {"ray_dedup": rp.dedup, "ray_solo": rp.count, "ray_autoscaling": rp.scale}


def compiled(task: Any, config: Any = CONFIG) -> dict[str, Any]:
    (obj,) = compile_call(call_of(task), run=RUN, action="a0.2", attempt=0, config=config,
                          code=CODE)
    return obj


def pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = job["spec"]["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"],
            *(g["template"] for g in cluster.get("workerGroupSpecs", []))]


def env_of(template: dict[str, Any]) -> dict[str, Any]:
    main = template["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in main["env"]}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_rayjobs_match_the_golden_files(name: str) -> None:
    text = to_yaml([compiled(TASKS[name])])
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.write_text(text)
    if not path.exists():
        pytest.fail(f"{path} is missing: create it with SHOAL_UPDATE_GOLDEN=1")
    diff = "".join(difflib.unified_diff(path.read_text().splitlines(True),
                                        text.splitlines(True), f"golden/{name}.yaml",
                                        "generated"))
    assert not diff, f"the RayJob changed (rewrite with SHOAL_UPDATE_GOLDEN=1 if intended):\n{diff}"


def test_a_head_and_two_worker_groups_through_kueue() -> None:
    job = compiled(rp.dedup)
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"
    spec = job["spec"]
    assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] == 60 and spec["activeDeadlineSeconds"] == 3600
    cluster = spec["rayClusterSpec"]
    assert "enableInTreeAutoscaling" not in cluster
    assert cluster["headGroupSpec"]["rayStartParams"] == {"dashboard-host": "0.0.0.0",
                                                          "log-color": "true"}
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert [(g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in groups.values()] == \
        [(2, 2, 2), (1, 1, 1)]
    resources = {n: g["template"]["spec"]["containers"][0]["resources"]["requests"]
                 for n, g in groups.items()}
    assert resources == {"cpu": {"cpu": "4", "memory": "16Gi"},  # the environment's
                         "gpu": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}}
    gpu = groups["gpu"]["template"]["spec"]
    assert gpu["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert "nodeSelector" not in groups["cpu"]["template"]["spec"]
    assert json.loads(json.dumps(__import__("yaml").safe_load(spec["runtimeEnvYAML"]))) == {
        "env_vars": {"RAY_DATA_VERBOSE": "1"}, "pip": ["datasketch==1.6.5"]}
    for template in pods(job):  # Kueue reads its labels from the RayJob only
        assert not any(k.startswith("kueue.x-k8s.io/") for k in template["metadata"]["labels"])


def test_the_head_runs_the_rank_program_as_the_driver_with_node_0s_contract() -> None:
    job = compiled(rp.dedup)
    assert job["spec"]["entrypoint"] == "python -m shoal._runtime.node.ray_job"
    head = env_of(job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"])
    assert head[contract.RUNTIME] == "ray" and head[contract.NODE_RANK] == "0"
    assert head[contract.NNODES] == "4"  # the head and 2 + 1 workers
    assert head[contract.TASK] == "dedup.dedup" and head[contract.CODE_BUNDLE] == CODE.uri
    assert head[contract.MASTER_ADDR] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert head[contract.MASTER_PORT] == "6379"
    assert head["DEDUP_SHARDS"] == "64"
    for template in pods(job):
        main = template["spec"]["containers"][0]
        assert "command" not in main  # KubeRay's `ray start` is the command
        assert main["image"] == "ghcr.io/example/ray-data:2026.11"
        assert env_of(template)[contract.POD_IP] == {"fieldRef": {"fieldPath": "status.podIP"}}
    worker = env_of(job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])
    assert contract.TASK not in worker and worker[contract.STORE] == CONFIG.store


def test_a_head_alone_has_no_worker_groups_and_no_queue_unless_configured() -> None:
    job = compiled(rp.count)
    assert "workerGroupSpecs" not in job["spec"]["rayClusterSpec"]
    assert "suspend" not in job["spec"] and job["spec"]["ttlSecondsAfterFinished"] == 0
    queued = compiled(rp.count, dataclasses.replace(CONFIG, default_queue="team"))
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"
    assert queued["spec"]["suspend"] is True


def test_autoscaling_sets_the_groups_bounds_and_the_autoscaler() -> None:
    cluster = compiled(rp.scale)["spec"]["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["autoscalerOptions"] == {"upscalingMode": "Conservative",
                                            "idleTimeoutSeconds": 60}
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 1, 4)


def test_kueue_refuses_an_autoscaling_rayjob_before_it_is_submitted() -> None:
    with pytest.raises(SpecError, match="autoscaling"):
        compiled(rp.scale, dataclasses.replace(CONFIG, default_queue="team"))


def test_the_webhook_rules_catch_what_the_schema_cannot() -> None:
    job = compiled(rp.dedup)
    check_rayjob(job)
    too_long = copy.deepcopy(job)
    too_long["metadata"]["name"] = "r" * 48
    with pytest.raises(SpecError, match="47"):
        check_rayjob(too_long)
    head_named = copy.deepcopy(job)
    head_named["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["groupName"] = "head"
    with pytest.raises(SpecError, match="reserves"):
        check_rayjob(head_named)
    many = copy.deepcopy(job)
    group = many["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    many["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [
        {**group, "groupName": f"g{i}"} for i in range(8)]
    with pytest.raises(SpecError, match="at most 7"):
        check_rayjob(many)
    kept = copy.deepcopy(job)
    kept["spec"]["shutdownAfterJobFinishes"] = False
    with pytest.raises(SpecError, match="1813"):
        check_rayjob(kept)
    bounds = copy.deepcopy(job)
    bounds["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = 3
    with pytest.raises(SpecError, match="minReplicas"):
        check_rayjob(bounds)


def test_dry_run_prints_the_rayjob() -> None:
    engine = KubernetesEngine(run=RUN, config=CONFIG, code=CODE)
    text = engine.dry_run(call_of(rp.count))
    assert "kind: RayJob" in text and "entrypoint: python -m shoal._runtime.node.ray_job" in text


# --- schemas --------------------------------------------------------------------------------

@cache
def rayjob_validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    from tests.kubernetes.test_schemas import closed

    return jsonschema.Draft7Validator(closed(json.loads(RAYJOB_SCHEMA.read_text())))


def test_every_rayjob_validates_strictly_against_the_vendored_crd() -> None:
    from tests.kubernetes.test_schemas import schema_errors

    for name, task in TASKS.items():
        assert schema_errors(rayjob_validator(), compiled(task)) == [], name


def test_the_closed_crd_schema_catches_unknown_fields() -> None:
    from tests.kubernetes.test_schemas import schema_errors

    job = compiled(rp.dedup)
    job["spec"]["shutdownAfterJobFinish"] = True
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 2
    job["spec"]["ttlSecondsAfterFinished"] = "60"
    errors = schema_errors(rayjob_validator(), job)
    assert any("shutdownAfterJobFinish" in e for e in errors), errors
    assert any("replica'" in e for e in errors), errors
    assert any(e.startswith("spec.ttlSecondsAfterFinished") for e in errors), errors


def test_every_ray_pod_template_validates_against_kubernetes_pod_schema() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    for name, task in TASKS.items():
        for i, template in enumerate(pods(compiled(task))):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"{name}-{i}", **template["metadata"]},
                   "spec": template["spec"]}
            try:
                kv.validate(pod, kv.latest_version(), strict=True)
            except kv.ValidationError as e:
                pytest.fail(f"{name} pod {i}: {'.'.join(map(str, e.absolute_path))}: "
                            f"{e.message}")
