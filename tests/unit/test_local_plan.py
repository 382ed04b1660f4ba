"""The local engine's process plan: pure, so tested by value."""

from __future__ import annotations

import pytest

import shoal
from shoal import _contract as contract
from shoal._contract import WorkerEnv
from shoal._engines.local.plan import plan_process, priority_for, request_for, worker_environ
from shoal._engines.local.pool import Request
from shoal.errors import SpecError

WENV = WorkerEnv(home="/h", store="file:///s", env_name="e", code_file="/f.py",
                 worker_id="e-w0", controller="/tmp/x/ctl.sock", run="r-1")


def test_request_defaults_to_one_cpu() -> None:
    assert request_for(shoal.TaskEnvironment("p-none").spec()) == Request(1.0, 0, 0)
    env = shoal.TaskEnvironment("p-res", resources=shoal.Resources(cpu=(2, 4),
                                                                    memory=("1Gi", "2Gi")))
    assert request_for(env.spec()) == Request(2.0, 2**30, 0)


def test_environment_of_a_worker() -> None:
    env = shoal.TaskEnvironment("p-env", env_vars={"A": "1"}, secrets=["TOKEN"])
    out = worker_environ(env.spec(), WENV, {"PATH": "/bin", "TOKEN": "t", "A": "0"})
    assert out["A"] == "1" and out["TOKEN"] == "t" and out["PATH"] == "/bin"
    assert out["SHOAL_CONTROLLER"] == "/tmp/x/ctl.sock" and out["PYTHONUNBUFFERED"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in out and not contract.gpus_emulated(out)


def test_gpus_beyond_the_machine_are_emulated_with_a_note() -> None:
    env = shoal.TaskEnvironment("p-gpu", resources=shoal.Resources(cpu=64, gpu="H200:8"))
    plan = plan_process(env.spec(), capacity=Request(2, 2**34, 0), wenv=WENV, base={},
                        priorities={})
    assert plan.request == Request(2, 0, 0)
    assert plan.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert contract.gpus_emulated(plan.environ)
    assert any("emulated on CPU" in c for c in plan.clamped)
    assert any("cpu=64" in c for c in plan.clamped)
    assert "clamped:" in plan.render(base={})


def test_missing_image_packages_are_noted() -> None:
    image = shoal.Image.from_debian_base().with_pip_packages("surely-not-installed-pkg-xyz")
    env = shoal.TaskEnvironment("p-img", image=image)
    plan = plan_process(env.spec(), capacity=Request(2, 2**34, 0), wenv=WENV, base={},
                        priorities={})
    assert any("surely-not-installed-pkg-xyz" in n for n in plan.notes)


def test_image_requirements_with_markers_are_noted_when_they_apply_here() -> None:
    image = shoal.Image.from_debian_base().with_pip_packages(
        "surely-not-installed-pkg-m1[extra]; python_version >= '3'",
        "surely-not-installed-pkg-m2; python_version < '3'")
    env = shoal.TaskEnvironment("p-img-markers", image=image)
    plan = plan_process(env.spec(), capacity=Request(2, 2**34, 0), wenv=WENV, base={},
                        priorities={})
    (note,) = [n for n in plan.notes if "lacks" in n]
    assert "surely-not-installed-pkg-m1" in note and "m2" not in note


def test_kueue_labels_pick_queue_and_priority() -> None:
    pt = shoal.PodTemplate(labels={"kueue.x-k8s.io/queue-name": "team-a",
                                   "kueue.x-k8s.io/priority-class": "high"})
    env = shoal.TaskEnvironment("p-kueue", pod_template=pt).spec()
    assert priority_for(env, {"high": 100}) == ("team-a", 100)
    with pytest.raises(SpecError, match="SHOAL_PRIORITY_CLASSES=high=100"):
        priority_for(env, {})
