"""Flyte 2's accelerator names and device helpers, mapped to Shoal's GPU names."""

from __future__ import annotations

import dataclasses

import pytest

import shoal
from shoal.errors import SpecError


@pytest.mark.parametrize(("gpu", "count", "name"), [
    ("A100 80G:8", 8, "A100-80G"),
    ("A100 80G", 1, "A100-80G"),
    ("H100:8", 8, "H100"),
    ("L40s:2", 2, "L40S"),
    ("RTX PRO 6000:1", 1, "RTX-PRO-6000"),
    ("GB10:1", 1, "GB10"),
    ("T4:1", 1, "T4"),
])
def test_flyte_strings_map_to_shoal_names(gpu: str, count: int, name: str) -> None:
    r = shoal.Resources(gpu=gpu)
    assert (r.gpu_count, r.accelerator) == (count, name)
    assert r.to_k8s()["limits"]["nvidia.com/gpu"] == str(count)


def test_flyte_and_shoal_spellings_are_the_same_request() -> None:
    assert shoal.Resources(gpu="A100 80G:8") == shoal.Resources(gpu="A100-80G:8")
    assert shoal.Resources(gpu=shoal.GPU("A100 80G", 8)) == shoal.Resources(gpu="A100-80G:8")
    assert shoal.Resources(gpu=shoal.Device(quantity=4)) == shoal.Resources(gpu=4)


def test_gpu_and_device_helpers() -> None:
    d = shoal.GPU(device="H100", quantity=2)
    assert d == shoal.Device(quantity=2, device_class="GPU", device="H100")
    assert shoal.Resources(gpu=d).accelerator == "H100"
    assert shoal.GPU("T4").quantity == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.quantity = 3  # type: ignore[misc]


@pytest.mark.parametrize(("device", "partition", "name"), [
    ("A100", "1g.5gb", "A100-MIG-1g.5gb"),
    ("A100 80G", "3g.40gb", "A100-80G-MIG-3g.40gb"),
    ("H100", "1g.10gb", "H100-MIG-1g.10gb"),
    ("H200", "7g.141gb", "H200-MIG-7g.141gb"),
])
def test_mig_partitions_map_to_their_own_accelerator(device: str, partition: str,
                                                     name: str) -> None:
    r = shoal.Resources(gpu=shoal.GPU(device, 1, partition=partition))
    assert (r.gpu_count, r.accelerator) == (1, name)


def _error(make: object) -> SpecError:
    with pytest.raises(SpecError) as err:
        make()  # type: ignore[operator]
    return err.value


def test_unknown_flyte_style_name_lists_the_known_with_did_you_mean() -> None:
    e = _error(lambda: shoal.Resources(gpu="A100 80GB:8"))
    assert e.field == "gpu" and e.value == "A100 80GB:8"
    assert "not a known accelerator name" in e.rule and "H100, H200, L4" in e.rule
    assert e.fix is not None and e.fix.startswith('did you mean "A100 80G"?')


def test_flyte_name_in_the_wrong_case() -> None:
    e = _error(lambda: shoal.Resources(gpu="a100 80g:2"))
    assert "case-sensitive" in e.rule and e.fix == 'did you mean "A100 80G"?'


def test_gpu_helper_refuses_unknown_types_and_bad_quantities() -> None:
    e = _error(lambda: shoal.GPU("H1000", 1))
    assert e.field == "GPU.device" and "known: A10, A10G" in e.rule
    assert e.fix is not None and e.fix.startswith('did you mean "H100"?')
    assert "quantity" in _error(lambda: shoal.GPU("H100", 0)).field
    assert "quantity" in _error(lambda: shoal.GPU("H100", True)).field  # type: ignore[arg-type]


def test_mig_partition_errors() -> None:
    e = _error(lambda: shoal.GPU("H100", 1, partition="1g.5gb"))
    assert e.field == "GPU.partition" and "1g.10gb, 1g.20gb" in e.rule
    e = _error(lambda: shoal.GPU("L4", 1, partition="1g.5gb"))
    assert "not on 'L4'" in e.rule and e.fix is not None and "drop partition=" in e.fix


@pytest.mark.parametrize("make", [
    lambda: shoal.TPU("V5P", "2x2x1"),
    lambda: shoal.Neuron("Trn1"),
    lambda: shoal.AMD_GPU("MI300X"),
    lambda: shoal.HABANA_GAUDI("Gaudi1"),
    lambda: shoal.Device(quantity=1, device_class="TPU", device="V5P"),
    lambda: shoal.Resources(gpu="Trn1:16"),
    lambda: shoal.Resources(gpu="Gaudi1:1"),
])
def test_devices_other_than_nvidia_gpus_are_refused(make: object) -> None:
    e = _error(make)
    assert "NVIDIA GPUs (nvidia.com/gpu) only" in e.rule
    assert e.fix is not None and 'gpu="H100:8"' in e.fix


def test_flyte_name_reaches_the_kubernetes_node_selector() -> None:
    from shoal._engines.kubernetes import compile_call
    from tests.kubernetes.conftest import CODE, CONFIG, RUN, call_of

    selector = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    config = dataclasses.replace(CONFIG, accelerators={"A100-80G": selector})
    env = shoal.TaskEnvironment(name="a100", resources=shoal.Resources(gpu="A100 80G:8"))

    @env.task
    def work() -> int:
        raise NotImplementedError

    [job] = compile_call(call_of(work), run=RUN, action="a0.1", attempt=0, config=config,
                         code=CODE)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == selector
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
