"""`Resources`: (request, limit) pairs, GPU specs, typed accessors and the Kubernetes form."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from shoal._api.resources import GPU_RESOURCE, Resources
from shoal.errors import SpecError


def _spec_error(field: str, value: object, **kwargs: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        Resources(**kwargs)
    err = info.value
    text = str(err)
    assert field in text
    assert repr(value) in text
    assert err.fix, "every error carries a fix"
    assert "Fix:" in text
    return err


def test_seed_resources_compile() -> None:
    r = Resources(cpu=64, memory="512Gi", gpu="H200:8", shm="16Gi", disk="200Gi")
    assert r.cpu_request == r.cpu_limit == 64.0
    assert r.memory_request_bytes == r.memory_limit_bytes == 512 * 2**30
    assert r.gpu_count == 8
    assert r.accelerator == "H200"
    assert r.shm_bytes == 16 * 2**30
    assert r.shm_quantity == "16Gi"
    assert r.disk_bytes == 200 * 2**30
    assert r.to_k8s() == {
        "requests": {
            "cpu": "64", "memory": "512Gi", "ephemeral-storage": "200Gi", GPU_RESOURCE: "8",
        },
        "limits": {
            "cpu": "64", "memory": "512Gi", "ephemeral-storage": "200Gi", GPU_RESOURCE: "8",
        },
    }


def test_request_limit_pairs() -> None:
    r = Resources(cpu=(2, 4), memory=("4Gi", "8Gi"), gpu="L4:1")
    assert (r.cpu_request, r.cpu_limit) == (2.0, 4.0)
    assert (r.memory_request_bytes, r.memory_limit_bytes) == (4 * 2**30, 8 * 2**30)
    assert r.to_k8s() == {
        "requests": {"cpu": "2", "memory": "4Gi", GPU_RESOURCE: "1"},
        "limits": {"cpu": "4", "memory": "8Gi", GPU_RESOURCE: "1"},
    }


def test_fractional_cpu_and_mixed_units() -> None:
    r = Resources(cpu=(0.5, "1500m"), memory=(1024**3, "2Gi"))
    assert r.to_k8s()["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert r.to_k8s()["limits"] == {"cpu": "1500m", "memory": "2Gi"}


def test_list_pair_is_accepted_and_stored_as_tuple() -> None:
    r = Resources(cpu=[1, 2])  # type: ignore[arg-type]
    assert r.cpu == (1, 2)
    assert r.cpu_limit == 2.0


def test_empty_resources() -> None:
    r = Resources()
    assert r.cpu_request is None and r.cpu_limit is None
    assert r.memory_request_bytes is None and r.memory_limit_bytes is None
    assert r.gpu_count == 0 and r.accelerator is None
    assert r.disk_bytes is None and r.shm_bytes is None and not r.shm_auto
    assert r.to_k8s() == {"requests": {}, "limits": {}}


def test_gpu_forms() -> None:
    assert (Resources(gpu=8).gpu_count, Resources(gpu=8).accelerator) == (8, None)
    assert (Resources(gpu="H100:2").gpu_count, Resources(gpu="H100:2").accelerator) == (2, "H100")
    # A bare accelerator name means one of it.
    assert (Resources(gpu="L4").gpu_count, Resources(gpu="L4").accelerator) == (1, "L4")
    # Names outside the known list are allowed: clusters name their own pools.
    assert Resources(gpu="H2000:2").accelerator == "H2000"
    assert Resources(gpu="nvidia-tesla-t4:1").accelerator == "nvidia-tesla-t4"
    assert Resources(gpu="A100-80G:4").gpu_count == 4
    assert Resources(gpu=0).to_k8s() == {"requests": {}, "limits": {}}


def test_shm_auto() -> None:
    r = Resources(shm="auto")
    assert r.shm_auto
    assert r.shm_bytes is None
    assert r.shm_quantity is None
    assert "shm" not in r.to_k8s()["requests"]


def test_equality_compares_amounts_not_spelling() -> None:
    assert Resources(cpu=2) == Resources(cpu="2") == Resources(cpu="2000m")
    assert Resources(memory="1Gi") == Resources(memory=2**30) == Resources(memory="1073741824")
    assert Resources(shm="1e9") == Resources(shm="1G")
    assert hash(Resources(cpu=(1, 2))) == hash(Resources(cpu=("1", "2000m")))
    assert Resources(cpu=2) != Resources(cpu=3)
    assert Resources(gpu="H100:1") != Resources(gpu=1)


def test_frozen_keyword_only_picklable_and_replaceable() -> None:
    r = Resources(cpu=2, memory="4Gi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.cpu = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        Resources(2)  # type: ignore[call-arg]
    assert pickle.loads(pickle.dumps(r)) == r
    bigger = dataclasses.replace(r, cpu=4)
    assert bigger.cpu_request == 4.0 and r.cpu_request == 2.0
    with pytest.raises(SpecError):
        dataclasses.replace(r, cpu="lots")


@pytest.mark.parametrize(
    ("kwargs", "field", "value", "rule_part", "fix_part"),
    [
        ({"cpu": (4, 2)}, "cpu", (4, 2), "limit (2) is below the request (4)", "cpu=(2, 4)"),
        (
            {"memory": ("8Gi", "4Gi")}, "memory", ("8Gi", "4Gi"),
            "limit (4Gi) is below the request (8Gi)", "memory=('4Gi', '8Gi')",
        ),
        ({"cpu": (1, 2, 3)}, "cpu", (1, 2, 3), "(request, limit)", "cpu=(request, limit)"),
        ({"cpu": "lots"}, "cpu", "lots", "not a Kubernetes quantity", '"500m"'),
        ({"cpu": ("lots", 2)}, "cpu request", "lots", "not a Kubernetes quantity", '"500m"'),
        ({"cpu": (1, "x")}, "cpu limit", "x", "not a Kubernetes quantity", '"500m"'),
        ({"memory": "4GB"}, "memory", "4GB", "not a Kubernetes quantity", "'4G' or '4Gi'"),
        ({"memory": "4gi"}, "memory", "4gi", "not a Kubernetes quantity", "'4Gi'"),
        ({"memory": -1}, "memory", -1, "negative", "1"),
        ({"disk": "200GB"}, "disk", "200GB", "not a Kubernetes quantity", "'200Gi'"),
        ({"shm": "16gb"}, "shm", "16gb", "not a Kubernetes quantity", "'16Gi'"),
        ({"shm": "Auto"}, "shm", "Auto", '"auto"', '"auto"'),
        ({"gpu": "h200:8"}, "gpu", "h200:8", "case-sensitive", "'H200:8'"),
        ({"gpu": "a100-80g"}, "gpu", "a100-80g", "case-sensitive", "'A100-80G'"),
        ({"gpu": "H200:x"}, "gpu", "H200:x", "whole number", 'gpu="H200:1"'),
        ({"gpu": "H200:-1"}, "gpu", "H200:-1", "whole number", 'gpu="H200:1"'),
        ({"gpu": "H200:1.5"}, "gpu", "H200:1.5", "whole number", 'gpu="H200:1"'),
        ({"gpu": ":8"}, "gpu", ":8", "name before ':' is empty", "gpu=8"),
        ({"gpu": "8"}, "gpu", "8", "count alone is an int", "gpu=8"),
        ({"gpu": -1}, "gpu", -1, "negative", "gpu=0"),
        ({"gpu": 1.5}, "gpu", 1.5, "int count", "gpu=2"),
        ({"gpu": True}, "gpu", True, "bool", "gpu=1"),
        ({"gpu": "H 200:1"}, "gpu", "H 200:1", "accelerator name", '"H200"'),
    ],
)
def test_bad_values_name_field_value_rule_and_fix(
    kwargs: dict[str, Any], field: str, value: object, rule_part: str, fix_part: str
) -> None:
    err = _spec_error(field, value, **kwargs)
    assert err.field == field
    assert rule_part in err.rule
    assert fix_part in str(err.fix)


def test_limit_equal_to_request_is_fine() -> None:
    r = Resources(cpu=("1", "1000m"), memory=("1Gi", 2**30))
    assert r.cpu_request == r.cpu_limit == 1.0
