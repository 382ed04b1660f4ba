"""Every generated object against the published schemas, strictly (no unknown fields).

- JobSets: the JobSet CRD's own openAPIV3Schema (v1alpha2), from ``../shared/k8s`` when that
  folder exists, closed wherever it declares ``properties``; and the typed JobSet models of
  the ``kubeflow-trainer-api`` package, when it is installed.
- Jobs (plain, driver, and each JobSet's Job template) and the RBAC objects: Kubernetes' own
  schemas, strict, as shipped inside the ``kubernetes-validate`` package (offline).
Each check skips, saying why, when its schema source is missing.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest
import yaml

from tests.kubernetes.conftest import (
    JOBSET_CRD,
    SHARED_K8S,
    all_objects,
    every_manifest,
    seed_manifests,
)

jsonschema = pytest.importorskip("jsonschema")


# --- the JobSet CRD, closed --------------------------------------------------------------------

def closed(schema: Any) -> Any:
    """A copy of an OpenAPI v3 schema in which every object that declares ``properties`` (and
    does not preserve unknown fields) forbids any other: what a strict API server does."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: closed(v) for k, v in out["properties"].items()}
        if not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
    for key in ("items", "not"):
        if isinstance(out.get(key), dict):
            out[key] = closed(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = closed(out["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = closed(out[key])
    return out


@cache
def jobset_validator() -> Any:
    if not JOBSET_CRD.exists():
        pytest.skip(f"no JobSet CRD at {JOBSET_CRD} (../shared/k8s is absent): the strict "
                    "CRD check needs it; the project itself never does")
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")
    schema = closed(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def schema_errors(validator: Any, obj: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]


def test_every_jobset_validates_strictly_against_the_crd() -> None:
    jobsets = all_objects(every_manifest(), "JobSet")
    assert len(jobsets) == 6  # the seed's, the variants' and an elastic gang's two starts
    for js in jobsets:
        assert schema_errors(jobset_validator(), js) == [], js["metadata"]["name"]


def test_the_closed_schema_catches_unknown_fields() -> None:
    js = copy.deepcopy(all_objects(seed_manifests(), "JobSet")[0])
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["completionModes"] = "Indexed"
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "env"][0]["valueFrom"] = {"fieldRef": {"fieldPath": "x", "bogus": 1}}
    errors = schema_errors(jobset_validator(), js)
    assert any("completionModes" in e for e in errors), errors
    assert any("bogus" in e for e in errors), errors


def test_shared_k8s_notes_are_where_the_tests_expect_them() -> None:
    if not SHARED_K8S.exists():
        pytest.skip(f"{SHARED_K8S} is absent: the CRD checks skip")
    assert JOBSET_CRD.exists()


# --- kubeflow-trainer-api's typed JobSet models -------------------------------------------------

def test_every_jobset_round_trips_through_the_typed_models() -> None:
    models = pytest.importorskip(
        "kubeflow_trainer_api.models",
        reason="kubeflow-trainer-api is not installed (pip install kubeflow-trainer-api)")
    for js in all_objects(every_manifest(), "JobSet"):
        # from_dict drops fields the models do not know, so a lossless round trip means every
        # field is known, at its place, with a value of its declared type.
        model = models.JobsetV1alpha2JobSet.from_dict(js)
        assert model.to_dict() == js


# --- Kubernetes' own schemas --------------------------------------------------------------------

def _jobs_and_rbac() -> list[dict[str, Any]]:
    manifests = every_manifest()
    objects = [o for objs in manifests.values() for o in objs if o["kind"] != "JobSet"]
    for js in all_objects(manifests, "JobSet"):
        for rj in js["spec"]["replicatedJobs"]:
            objects.append({"apiVersion": "batch/v1", "kind": "Job",
                            "metadata": {"name": f"{js['metadata']['name']}-{rj['name']}-0"},
                            **rj["template"]})
    return objects


def test_jobs_and_rbac_validate_strictly_against_kubernetes_schemas() -> None:
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate is not installed (pip install kubernetes-validate)")
    objects = _jobs_and_rbac()
    assert {o["kind"] for o in objects} == {"Job", "ServiceAccount", "Role", "RoleBinding"}
    for obj in objects:
        try:
            kv.validate(obj, kv.latest_version(), strict=True)
        except kv.ValidationError as e:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: "
                        f"{'.'.join(map(str, e.absolute_path))}: {e.message}")


def test_kubernetes_schemas_catch_unknown_fields() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    job = copy.deepcopy(all_objects(seed_manifests(), "Job")[0])
    job["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(job, kv.latest_version(), strict=True)
