"""`shoal.plugins.ray`: Flyte's Ray configs, compiled to a Ray gang or refused when built."""

from __future__ import annotations

import json
from typing import Any

import pytest

import shoal
from shoal._spec.ray import nodes_config
from shoal.errors import SpecError
from shoal.plugins.ray import (
    AutoscalerOptionsConfig,
    HeadNodeConfig,
    RayJobConfig,
    WorkerNodeConfig,
)


def _refused(make: Any) -> SpecError:
    with pytest.raises(SpecError) as err:
        make()
    return err.value


def test_a_head_and_two_groups_make_one_gang_head_first() -> None:
    env = shoal.TaskEnvironment("ray-a", resources=shoal.Resources(cpu=2, memory="2Gi"),
                                plugin_config=RayJobConfig(
        head_node_config=HeadNodeConfig(ray_start_params={"log_color": "True"}),
        worker_node_config=[WorkerNodeConfig(group_name="cpu", replicas=2),
                            WorkerNodeConfig(group_name="gpu", replicas=1,
                                             requests=shoal.Resources(cpu=4, gpu=1))],
        runtime_env={"env_vars": {"A": "1"}}))
    c = env.spec().cluster
    assert c is not None and c.runtime == "ray" and c.replicas == 4 and c.nproc_per_node == 1
    assert c.ray is not None
    assert [c.ray.group_of(k).name for k in range(4)] == ["head", "cpu", "cpu", "gpu"]
    assert c.ray.head.start_params == (("log-color", "True"),)  # Flyte's _ spelling too
    nodes = json.loads(nodes_config(c.ray, env.resources))
    assert [(n["num_cpus"], n["num_gpus"]) for n in nodes] == [(2, 0), (2, 0), (2, 0), (4, 1)]
    assert nodes[0]["memory"] == 2 * 1024**3 and "memory" not in nodes[3]
    assert json.loads(nodes[0]["runtime_env"]) == {"env_vars": {"A": "1"}}
    assert "runtime_env" not in nodes[1]


def test_a_fractional_cpu_is_a_whole_raylet_cpu() -> None:
    env = shoal.TaskEnvironment("ray-b", resources=shoal.Resources(cpu="500m"),
                                plugin_config=RayJobConfig(worker_node_config=[]))
    c = env.spec().cluster
    assert c is not None and c.ray is not None and c.replicas == 1
    assert json.loads(nodes_config(c.ray, env.resources))[0]["num_cpus"] == 1


@pytest.mark.parametrize(("make", "field", "words"), [
    (lambda: WorkerNodeConfig(group_name="w", replicas=0), "replicas", "int >= 1"),
    (lambda: WorkerNodeConfig(group_name="w", replicas=2, min_replicas=3, max_replicas=2),
     "min_replicas", "<= max_replicas"),
    (lambda: WorkerNodeConfig(group_name="w", replicas=5, max_replicas=4), "replicas",
     "between"),
    (lambda: WorkerNodeConfig(group_name="Bad_Name", replicas=1), "group_name", "lowercase"),
    (lambda: WorkerNodeConfig(group_name="head", replicas=1), "group_name", "not 'head'"),
    (lambda: RayJobConfig(worker_node_config=[], head_node_config=HeadNodeConfig(
        ray_start_params={"port": "6379"})), "ray_start_params['port']", "GCS port"),
    (lambda: RayJobConfig(worker_node_config=[WorkerNodeConfig(
        group_name="w", replicas=1, ray_start_params={"temp-dir": "/x"})]),
     "ray_start_params['temp-dir']", "temp dir"),
    (lambda: RayJobConfig(worker_node_config=[], head_node_config=HeadNodeConfig(
        ray_start_params={"num-cpus": "4"})), "ray_start_params['num-cpus']", "requests="),
    (lambda: RayJobConfig(worker_node_config=[WorkerNodeConfig(group_name="w", replicas=1)],
                          address="ray://10.0.0.1:10001"), "address", "existing cluster"),
    (lambda: RayJobConfig(worker_node_config=[WorkerNodeConfig(group_name="w", replicas=1),
                                              WorkerNodeConfig(group_name="w", replicas=1)]),
     "group_name", "unique"),
    (lambda: RayJobConfig(worker_node_config=[], runtime_env=["pip"]), "runtime_env", "dict"),
    (lambda: RayJobConfig(worker_node_config=[], autoscaler_options=AutoscalerOptionsConfig()),
     "autoscaler_options", "enable_autoscaling"),
    (lambda: RayJobConfig(worker_node_config=[], ttl_seconds_after_finished=-1),
     "ttl_seconds_after_finished", ">= 0"),
])
def test_bad_configs_are_refused_when_built(make: Any, field: str, words: str) -> None:
    e = _refused(make)
    assert field in e.field and words in str(e), str(e)
    assert e.fix


@pytest.mark.filterwarnings("ignore:ReusePolicy.replicas=1, concurrency=2")
@pytest.mark.parametrize(("reuse", "config", "words"), [
    (dict(replicas=2), RayJobConfig(worker_node_config=[]), "replicas=1"),
    (dict(replicas=1, concurrency=2), RayJobConfig(worker_node_config=[]), "concurrency=1"),
    (dict(replicas=1), RayJobConfig(worker_node_config=[], shutdown_after_job_finishes=True),
     "shutdown_after_job_finishes"),
])
def test_flytes_reuse_rules(reuse: dict[str, int], config: RayJobConfig, words: str) -> None:
    policy = shoal.ReusePolicy(**reuse)
    e = _refused(lambda: shoal.TaskEnvironment("ray-r", plugin_config=config, reusable=policy))
    assert words in str(e)


def test_a_reused_cluster_is_kept_for_idle_ttl() -> None:
    env = shoal.TaskEnvironment("ray-k", plugin_config=RayJobConfig(worker_node_config=[]),
                                reusable=shoal.ReusePolicy(replicas=1, idle_ttl=600))
    spec = env.spec()
    assert spec.reuse is not None and spec.reuse.idle_ttl == 600
    assert spec.cluster is not None and spec.cluster.ray is not None


def test_address_makes_a_plain_task_that_joins() -> None:
    env = shoal.TaskEnvironment("ray-j", plugin_config=RayJobConfig(
        worker_node_config=[], address="ray://10.0.0.5:10001",
        runtime_env={"pip": ["numpy"]}))
    spec = env.spec()
    assert spec.cluster is None
    assert json.loads(spec.env_vars["SHOAL_RAY_INIT"]) == {
        "address": "ray://10.0.0.5:10001", "runtime_env": {"pip": ["numpy"]}}


def test_ttl_keeps_the_cluster_only_with_shutdown_after_job_finishes() -> None:
    kept = RayJobConfig(worker_node_config=[], shutdown_after_job_finishes=True,
                        ttl_seconds_after_finished=300)
    not_kept = RayJobConfig(worker_node_config=[], ttl_seconds_after_finished=300)
    for config, keep in ((kept, 300), (not_kept, None)):
        c = config.environment_settings("here").cluster
        assert c is not None and c.ray is not None and c.ray.keep_after == keep


def test_flytes_import_is_renamed_in_the_refusal() -> None:
    foreign = type("RayJobConfig", (), {"__module__": "flyteplugins.ray.task"})()
    e = _refused(lambda: shoal.TaskEnvironment("ray-f", plugin_config=foreign))
    assert "from shoal.plugins.ray import RayJobConfig" in str(e.fix)
