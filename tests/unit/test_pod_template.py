"""`PodTemplate`: Kubernetes label rules, Kueue labels, an immutable deep-copied PodSpec."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, ClassVar

import pytest

from shoal._api.pod_template import (
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    PodTemplate,
)
from shoal.errors import SpecError


def test_kueue_labels() -> None:
    assert KUEUE_QUEUE_NAME_LABEL == "kueue.x-k8s.io/queue-name"
    assert KUEUE_PRIORITY_CLASS_LABEL == "kueue.x-k8s.io/priority-class"
    pt = PodTemplate(labels={KUEUE_QUEUE_NAME_LABEL: "team-a", KUEUE_PRIORITY_CLASS_LABEL: "high"})
    assert pt.queue_name == "team-a"
    assert pt.priority_class == "high"
    empty = PodTemplate()
    assert empty.queue_name is None and empty.priority_class is None
    assert empty.labels == {} and empty.annotations == {} and empty.pod_spec is None
    assert empty.primary_container_name == "primary"


def test_dict_views_are_copies() -> None:
    labels = {"app": "trainer"}
    spec: dict[str, Any] = {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu"}]}
    pt = PodTemplate(labels=labels, annotations={"note": "x"}, pod_spec=spec)
    # Changing what was passed in changes nothing inside.
    labels["app"] = "other"
    spec["nodeSelector"]["pool"] = "cpu"
    spec["tolerations"].append({"key": "more"})
    assert pt.labels == {"app": "trainer"}
    assert pt.pod_spec == {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu"}]}
    # Changing what comes out changes nothing inside either.
    out = pt.pod_spec
    assert out is not None
    out["nodeSelector"]["pool"] = "tpu"
    pt.labels["app"] = "changed"
    pt.annotations["note"] = "changed"
    assert pt.pod_spec == {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu"}]}
    assert pt.labels == {"app": "trainer"}
    assert pt.annotations == {"note": "x"}


def test_frozen_hashable_equal_by_content_and_picklable() -> None:
    a = PodTemplate(labels={"a": "1", "b": "2"}, pod_spec={"x": {"y": [1, 2]}})
    b = PodTemplate(labels={"b": "2", "a": "1"}, pod_spec={"x": {"y": [1, 2]}})
    assert a == b and hash(a) == hash(b)
    assert a != PodTemplate(labels={"a": "1"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.primary_container_name = "main"  # type: ignore[misc]
    restored = pickle.loads(pickle.dumps(a))
    assert restored == a and restored.pod_spec == a.pod_spec
    assert "labels={'a': '1', 'b': '2'}" in repr(a)


def test_valid_keys_and_values() -> None:
    pt = PodTemplate(
        labels={
            "app": "",
            "example.com/team": "ml_pretrain.v2",
            "a" * 63: "b" * 63,
            ("s" * 60 + ".io") + "/" + "n" * 63: "A-1",
        },
        annotations={"example.com/description": "free text: spaces, = and / are fine"},
        primary_container_name="trainer-0",
    )
    assert pt.primary_container_name == "trainer-0"


def test_kubernetes_client_models_are_converted() -> None:
    class V1Toleration:  # the shape kubernetes-client models have; no import of kubernetes
        openapi_types: ClassVar[dict[str, str]] = {"key": "str", "toleration_seconds": "int"}
        attribute_map: ClassVar[dict[str, str]] = {
            "key": "key", "toleration_seconds": "tolerationSeconds",
        }

        def __init__(self) -> None:
            self.key = "gpu"
            self.toleration_seconds = 30

    class V1PodSpec:
        openapi_types: ClassVar[dict[str, str]] = {
            "tolerations": "list", "node_selector": "dict", "host_network": "bool",
        }
        attribute_map: ClassVar[dict[str, str]] = {
            "tolerations": "tolerations", "node_selector": "nodeSelector",
            "host_network": "hostNetwork",
        }

        def __init__(self) -> None:
            self.tolerations = [V1Toleration()]
            self.node_selector = {"pool": "gpu"}
            self.host_network = None  # unset fields are left out

    pt = PodTemplate(pod_spec=V1PodSpec())
    assert pt.pod_spec == {
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "tolerationSeconds": 30}],
    }


def _spec_error(field: str, value: object, **kwargs: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        PodTemplate(**kwargs)
    err = info.value
    text = str(err)
    assert field in text
    assert repr(value) in text
    assert err.fix, "every error carries a fix"
    assert "Fix:" in text
    return err


@pytest.mark.parametrize(
    ("kwargs", "field", "value", "rule_part", "fix_part"),
    [
        ({"labels": ["a"]}, "labels", ["a"], "dict", "queue-name"),
        ({"labels": {"": "x"}}, "labels", "", "empty", "'value'"),
        ({"labels": {"a b": "x"}}, "labels", "a b", "name part", "'a-b'"),
        ({"labels": {"-a": "x"}}, "labels", "-a", "name part", "'a'"),
        ({"labels": {"x" * 64: "v"}}, "labels", "x" * 64, "at most 63", "x" * 63),
        ({"labels": {"/a": "x"}}, "labels", "/a", "prefix before '/'", "'a'"),
        ({"labels": {"a/b/c": "x"}}, "labels", "a/b/c", "at most one '/'", "'a.b/c'"),
        ({"labels": {"Example.com/a": "x"}}, "labels", "Example.com/a", "DNS subdomain",
         "'example.com/a'"),
        ({"labels": {"p" * 254 + "/a": "x"}}, "labels", "p" * 254 + "/a", "at most 253", "/a"),
        ({"labels": {1: "x"}}, "labels", 1, "strings", "'1'"),
        ({"labels": {"a": 1}}, "labels['a']", 1, "strings", "'1'"),
        ({"labels": {"a": "b c"}}, "labels['a']", "b c", "label value", "'b-c'"),
        ({"labels": {"a": "-b-"}}, "labels['a']", "-b-", "label value", "'b'"),
        ({"labels": {"a": "v" * 64}}, "labels['a']", "v" * 64, "at most 63", "v" * 63),
        ({"labels": {"kueue.x-k8s.io/queue": "q"}}, "labels", "kueue.x-k8s.io/queue",
         "Kueue", "'kueue.x-k8s.io/queue-name'"),
        ({"labels": {"kueue.x-k8s.io/priority-clas": "q"}}, "labels",
         "kueue.x-k8s.io/priority-clas", "Kueue", "'kueue.x-k8s.io/priority-class'"),
        ({"annotations": {"kueue.x-k8s.io/queue-name": "q"}}, "annotations",
         "kueue.x-k8s.io/queue-name", "labels only", "labels={'kueue.x-k8s.io/queue-name'"),
        ({"annotations": {"a": 3}}, "annotations['a']", 3, "strings", "'3'"),
        ({"annotations": "a=b"}, "annotations", "a=b", "dict", "annotations={"),
        ({"annotations": {"bad key": "v"}}, "annotations", "bad key", "name part", "'bad-key'"),
        ({"pod_spec": "nodeSelector: {}"}, "pod_spec", "nodeSelector: {}", "dict",
         "pod_spec={"),
        ({"pod_spec": {"node_selector": {}}}, "pod_spec", "node_selector", "camelCase",
         "'nodeSelector'"),
        ({"pod_spec": {"tolerations_": []}}, "pod_spec", "tolerations_", "camelCase",
         "'tolerations'"),
        ({"pod_spec": {"x": float("nan")}}, "pod_spec", {"x": float("nan")}, "JSON", "dicts"),
        ({"pod_spec": {"x": {1, 2}}}, "pod_spec", {"x": {1, 2}}, "JSON", "dicts"),
        ({"primary_container_name": "Main"}, "primary_container_name", "Main", "DNS label",
         "'main'"),
        ({"primary_container_name": ""}, "primary_container_name", "", "DNS label",
         "'primary'"),
    ],
)
def test_bad_input_names_field_value_rule_and_fix(
    kwargs: dict[str, Any], field: str, value: object, rule_part: str, fix_part: str
) -> None:
    err = _spec_error(field, value, **kwargs)
    assert err.field == field
    assert rule_part in err.rule
    assert fix_part in str(err.fix)


def test_unknown_but_distant_pod_spec_fields_and_kueue_keys_are_allowed() -> None:
    # Newer Kubernetes fields Shoal does not list yet must not be blocked.
    PodTemplate(pod_spec={"someFutureField": True})
    PodTemplate(labels={"kueue.x-k8s.io/some-new-label": "x"})


def test_annotations_have_a_total_size_limit() -> None:
    with pytest.raises(SpecError, match="256"):
        PodTemplate(annotations={f"k{i}": "x" * 60_000 for i in range(5)})


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        PodTemplate({"a": "b"})  # type: ignore[call-arg]
