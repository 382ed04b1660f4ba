"""Clustered environments are validated when they are defined, with the fix in the message."""

from __future__ import annotations

from datetime import timedelta

import pytest

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, JaxRun, TorchRun
from shoal.errors import SpecError


def test_defaults_and_spec() -> None:
    env = ClusteredTaskEnvironment("c-default", replicas=4, nproc_per_node=8,
                                   resources=shoal.Resources(gpu="H200:8", shm="16Gi"),
                                   failure_policy=ClusterFailurePolicy(
                                       max_restarts=1, resume_after_preemption=True,
                                       collective_timeout=timedelta(minutes=2)))
    spec = env.spec().cluster
    assert spec is not None
    assert (spec.replicas, spec.nproc_per_node, spec.world_size) == (4, 8, 32)
    assert spec.runtime == "torch" and spec.rdzv_backend == "static"
    assert spec.max_restarts == 1 and spec.resume_after_preemption
    assert spec.collective_timeout == 120.0


@pytest.mark.parametrize(
    ("kwargs", "field", "fix"),
    [
        ({"replicas": 0}, "replicas", "replicas=1"),
        ({"nproc_per_node": 0}, "nproc_per_node", "nproc_per_node=1"),
        ({"replicas": 2.5}, "replicas", None),
        ({"nproc_per_node": 8, "resources": shoal.Resources(gpu=4)}, "nproc_per_node",
         "use nproc_per_node=4"),
        ({"nproc_per_node": 2, "runtime": JaxRun()}, "nproc_per_node", "use nproc_per_node=1"),
        ({"runtime": "torchrun"}, "runtime", "TorchRun()"),
        ({"failure_policy": {"max_restarts": 1}}, "failure_policy", "ClusterFailurePolicy"),
    ],
)
def test_bad_topology(kwargs: dict[str, object], field: str, fix: str | None) -> None:
    with pytest.raises(SpecError) as err:
        ClusteredTaskEnvironment("c-bad", **kwargs)  # type: ignore[arg-type]
    assert field in err.value.field
    if fix:
        assert fix in str(err.value)


def test_gpu_message_names_both_numbers() -> None:
    with pytest.raises(SpecError) as err:
        ClusteredTaskEnvironment("c-gpu", nproc_per_node=8, resources=shoal.Resources(gpu=4))
    assert "resources.gpu per node (4)" in str(err.value) and "=8" in str(err.value)


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda: TorchRun(rdzv_backend="etcd"), "'static', 'c10d'"),
        (lambda: TorchRun(max_restarts=-1), "max_restarts"),
        (lambda: ClusterFailurePolicy(max_restarts=-2), "max_restarts"),
        (lambda: ClusterFailurePolicy(resume_after_preemption="yes"), "must be a bool"),
        (lambda: ClusterFailurePolicy(collective_timeout=0), "positive number of seconds"),
    ],
)
def test_bad_runtime_and_policy(make: object, text: str) -> None:
    with pytest.raises(SpecError, match=text):
        make()  # type: ignore[operator]


def test_flyte_name_for_resuming_is_accepted() -> None:
    env = ClusteredTaskEnvironment(
        "c-flyte", failure_policy=ClusterFailurePolicy(restart_on_host_maintenance=True))
    assert env.spec().cluster is not None and env.spec().cluster.resume_after_preemption


def test_override_is_validated_and_drops_cached_specs() -> None:
    env = ClusteredTaskEnvironment("c-over", replicas=4, nproc_per_node=2,
                                   resources=shoal.Resources(gpu=2))

    @env.task
    def f() -> int:
        return 0

    assert f.spec().env.cluster.replicas == 4  # type: ignore[union-attr]
    env.override("replicas", 2)
    assert f.spec().env.cluster.replicas == 2  # type: ignore[union-attr]
    with pytest.raises(SpecError, match="nproc_per_node"):
        env.override("nproc_per_node", 3)
    assert env.nproc_per_node == 2
    with pytest.raises(SpecError, match="only replicas, min_replicas and nproc_per_node"):
        env.override("image", 1)


def test_rank_env_is_what_torchrun_gives() -> None:
    from shoal._contract import NodeEnv, torch_rank_env

    node = NodeEnv(home="h", store="s", run="r", action="a0", attempt=0, env_name="e",
                   code_file="f", task="t", io="x", node_rank=1, nnodes=2, nproc_per_node=2,
                   master_addr="10.0.0.1", master_port=29500, restart_attempt=3)
    env = torch_rank_env(node, 1)
    assert env["RANK"] == "3" and env["LOCAL_RANK"] == "1" and env["WORLD_SIZE"] == "4"
    assert env["LOCAL_WORLD_SIZE"] == "2" and env["GROUP_RANK"] == "1"
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "29500"
    assert env["TORCHELASTIC_RUN_ID"].endswith("-3")  # rotates with the restart attempt


def test_launcher_compiles_torchrun_commands() -> None:
    from shoal._contract import NodeEnv
    from shoal._runtime.node.rank_start import torchrun_argv

    node = NodeEnv(home="h", store="s", run="r", action="a0", attempt=0, env_name="e",
                   code_file="f", task="t", io="x", node_rank=1, nnodes=2, nproc_per_node=4,
                   master_addr="m", master_port=29500, restart_attempt=0,
                   rdzv_backend="c10d", torch_max_restarts=2)
    argv = torchrun_argv(node)
    assert "--nnodes=2" in argv and "--nproc-per-node=4" in argv and "--node-rank=1" in argv
    assert "--rdzv-endpoint=m:29500" in argv and "--max-restarts=2" in argv
    assert "--rdzv-conf=is_host=0,join_timeout=300" in argv
    assert argv[-2:] == ["-m", "shoal._runtime.node.rank"]
