"""What a call compiles to, piece by piece: the env contract the launcher reads, resources,
placement, the user's pod template, the driver, and the errors a bad spec or config gets."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._engines.kubernetes import (
    CodeBundle,
    KubeConfig,
    compile_call,
    compile_driver,
    gpu_products,
)
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy
from shoal.errors import SpecError
from tests.kubernetes import seed_program, variants_program
from tests.kubernetes.conftest import (
    CODE,
    CONFIG,
    RUN,
    SPOT_CONFIG,
    call_of,
    every_manifest,
    seed_manifests,
    variant_manifests,
)


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def _container(obj: dict[str, Any], name: str = "primary") -> dict[str, Any]:
    return next(c for c in _pod_spec(obj)["containers"] if c["name"] == name)


def _as_launched(container: dict[str, Any], **field_values: str) -> dict[str, str]:
    """The environment the container's process sees, with the downward-API values given."""
    env: dict[str, str] = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e["valueFrom"]:
            env[e["name"]] = field_values[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _compile(task: Any, config: KubeConfig = CONFIG, **kw: Any) -> list[dict[str, Any]]:
    args = {"run": RUN, "action": "a0.1", "attempt": 0, "config": config, "code": CODE, **kw}
    return compile_call(call_of(task), **args)


# --- the env contract ---------------------------------------------------------------------------

def test_every_node_gets_the_launchers_contract_with_rank_and_restart_from_the_pod() -> None:
    js = seed_manifests()["pretrain"][0]
    container = _container(js)
    assert container["command"] == ["python", "-m", "shoal._runtime.node.launcher"]
    env = _as_launched(container, **{
        "metadata.annotations['batch.kubernetes.io/job-completion-index']": "3",
        "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']": "1"})
    node = NodeEnv.from_env(env)  # exactly what the launcher does first
    name = js["metadata"]["name"]
    assert (node.node_rank, node.restart_attempt, node.nnodes, node.nproc_per_node) == (3, 1, 4, 8)
    assert node.master_addr == f"{name}-node-0-0.{name}"
    assert js["spec"]["network"] == {"enableDNSHostnames": True,
                                     "publishNotReadyAddresses": True, "subdomain": name}
    assert node.io == f"s3://shoal-bucket/store/runs/{RUN}/a0.1/0"
    assert node.checkpoint_uri == f"s3://shoal-bucket/store/checkpoints/{RUN}/a0.1"
    assert node.code_file == "/var/lib/shoal/code/seed_program.py"
    assert node.rank_log_dir == "" and node.launch == "direct"
    assert env[contract.CODE_BUNDLE] == CODE.uri


def test_a_plain_task_is_a_one_node_launch() -> None:
    job = seed_manifests()["data"][0]
    env = _as_launched(_container(job))
    node = NodeEnv.from_env(env)
    assert (node.node_rank, node.nnodes, node.nproc_per_node, node.master_addr) == (
        0, 1, 1, "localhost")
    assert env[contract.PREIMPORT] == "0"
    assert job["spec"]["backoffLimit"] == 0 and "suspend" not in job["spec"]


def test_the_checkpoint_follows_the_lineage_of_a_resumed_run() -> None:
    js = _compile(seed_program.train, lineage="r-first")[0]
    env = _as_launched(_container(js), **{
        "metadata.annotations['batch.kubernetes.io/job-completion-index']": "0",
        "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']": "0"})
    assert env[contract.CHECKPOINT_URI] == "s3://shoal-bucket/store/checkpoints/r-first/a0.1"


def test_runtimes_and_launch_modes() -> None:
    m = variant_manifests()
    field_values = {
        "metadata.annotations['batch.kubernetes.io/job-completion-index']": "0",
        "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']": "0"}
    jax = NodeEnv.from_env(_as_launched(_container(m["jax"][0]), **field_values))
    assert (jax.runtime, jax.launch) == ("jax", "direct")
    c10d = NodeEnv.from_env(_as_launched(_container(m["custom"][0]), **field_values))
    assert (c10d.rdzv_backend, c10d.torch_max_restarts, c10d.launch) == ("c10d", 2, "torchrun")


# --- resources and placement --------------------------------------------------------------------

def test_resources_shm_disk_and_accelerator() -> None:
    m = seed_manifests()
    data = _container(m["data"][0])["resources"]
    assert data["requests"] == {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "200Gi"}
    assert data["limits"] == data["requests"]
    js = m["pretrain"][0]
    pretrain = _container(js)["resources"]
    assert pretrain["limits"]["nvidia.com/gpu"] == pretrain["requests"]["nvidia.com/gpu"] == "8"
    spec = _pod_spec(js)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert spec["tolerations"] == [dict(CONFIG.gpu_tolerations[0])]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in \
        spec["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in _container(js)["volumeMounts"]
    jax = _pod_spec(variant_manifests()["jax"][0])
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in jax["volumes"]


def test_timeouts_fail_the_jobset_instead_of_restarting_it() -> None:
    js = seed_manifests()["pretrain"][0]
    assert js["spec"]["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"] == 86400
    rule = js["spec"]["failurePolicy"]["rules"][0]
    assert rule == {"name": "timedOut", "action": "FailJobSet",
                    "onJobFailureReasons": ["DeadlineExceeded"]}


@pytest.mark.parametrize("policy", [
    ClusterFailurePolicy(max_restarts=3),
    ClusterFailurePolicy(max_restarts=2, resume_after_preemption=True),
    ClusterFailurePolicy(max_restarts=0, restart_on_host_maintenance=True),
])
def test_failure_policy(policy: ClusterFailurePolicy) -> None:
    env = ClusteredTaskEnvironment(name="policy-env", replicas=2, failure_policy=policy)

    @env.task
    def work() -> int:
        raise NotImplementedError

    js = _compile(work)[0]
    failure = js["spec"]["failurePolicy"]
    job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert failure["maxRestarts"] == policy.max_restarts
    if policy.resumes_after_preemption:
        assert job["podFailurePolicy"] == {"rules": [{
            "action": "FailJob",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
        assert failure["rules"] == [{"name": "resumeAfterPreemption",
                                     "action": "RestartJobSetAndIgnoreMaxRestarts",
                                     "onJobFailureReasons": ["PodFailurePolicy"]}]
    else:
        assert "podFailurePolicy" not in job and "rules" not in failure


# --- the user's pod template, images, secrets, queues -------------------------------------------

def test_the_users_pod_template_is_merged_into_shoals() -> None:
    js = variant_manifests()["custom"][0]
    spec = _pod_spec(js)
    main = _container(js)
    assert [c["name"] for c in spec["containers"]] == ["primary", "sidecar"]
    assert main["command"] == list(SPOT_CONFIG.launcher_command)
    assert main["env"][-1] == {"name": "EXTRA", "value": "1"}
    assert main["env"][0] == {"name": "NCCL_DEBUG", "value": "WARN"}
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "shoal-secrets", "key": "WANDB_API_KEY"}}} in main["env"]
    assert main["securityContext"] == {"runAsNonRoot": True}
    assert [m["mountPath"] for m in main["volumeMounts"]] == ["/var/lib/shoal", "/datasets"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-spot": "true",
                                    "topology.kubernetes.io/zone": "us-east1-b"}
    assert [t["key"] for t in spec["tolerations"]] == [
        "nvidia.com/gpu", "cloud.google.com/gke-spot", "team"]
    assert spec["priorityClassName"] == "batch-low"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    pod_meta = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert pod_meta["annotations"] == {"example.com/owner": "ml"}
    assert pod_meta["labels"]["team"] == "research"
    assert js["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    image = variants_program.custom_env.image
    assert main["image"] == image.uri("registry.example.com/ml")
    assert {"name": contract.S3_ENDPOINT, "value": "http://minio.storage:9000"} in main["env"]


def test_the_default_queue_applies_to_tasks_but_not_to_the_driver() -> None:
    long_plain = variant_manifests()["long_plain"][0]
    assert long_plain["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default-queue"
    assert long_plain["spec"]["suspend"] is True
    driver = compile_driver(call_of(seed_program.main), run=RUN, config=SPOT_CONFIG,
                            code=CODE)[0]
    assert "kueue.x-k8s.io/queue-name" not in driver["metadata"]["labels"]
    assert "suspend" not in driver["spec"]


def test_the_driver_runs_as_the_service_account_with_the_config() -> None:
    (driver,) = seed_manifests()["driver"]
    spec = _pod_spec(driver)
    assert spec["serviceAccountName"] == CONFIG.service_account
    env = _as_launched(_container(driver))
    assert KubeConfig.from_json(env[contract.KUBE_CONFIG]) == CONFIG
    assert env[contract.ENGINE] == "kubernetes" and env[contract.TASK] == "driver.main"
    assert env[contract.IO] == f"s3://shoal-bucket/store/runs/{RUN}/driver"
    assert driver["metadata"]["labels"]["shoal.dev/role"] == "driver"


def test_rbac_lets_the_driver_create_and_watch_its_children() -> None:
    sa, role, binding = seed_manifests()["rbac"]
    assert (sa["kind"], role["kind"], binding["kind"]) == ("ServiceAccount", "Role",
                                                          "RoleBinding")
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert {"create", "watch", "delete"} <= granted[("batch", "jobs")]
    assert {"create", "watch", "delete"} <= granted[("jobset.x-k8s.io", "jobsets")]
    assert {"get", "list", "watch"} <= granted[("", "pods")]
    assert "get" in granted[("", "pods/log")]
    assert "watch" in granted[("kueue.x-k8s.io", "workloads")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "shoal-driver",
                                    "namespace": "ml-research"}]


# --- errors a bad spec or config gets -----------------------------------------------------------

def _env_task(**env_kwargs: Any) -> Any:
    env = shoal.TaskEnvironment(name="bad-env", **env_kwargs)

    @env.task
    def work() -> int:
        raise NotImplementedError

    return work


@pytest.mark.parametrize(("env_kwargs", "config", "words"), [
    ({"secrets": ["TOKEN"]}, CONFIG, ["secret_name", "TOKEN"]),
    ({}, dataclasses.replace(CONFIG, default_image=None), ["default_image"]),
    ({"pod_template": shoal.PodTemplate(pod_spec={"restartPolicy": "OnFailure"})}, CONFIG,
     ["restartPolicy", "Never"]),
    ({"pod_template": shoal.PodTemplate(pod_spec={"volumes": [
        {"name": "shoal-work", "emptyDir": {}}]})}, CONFIG, ["volume name"]),
    ({"pod_template": shoal.PodTemplate(pod_spec={"containers": [
        {"name": "primary", "volumeMounts": [{"name": "x", "mountPath": "/var/lib/shoal"}]}]})},
     CONFIG, ["mounts this path"]),
])
def test_bad_specs_are_named_with_a_fix(env_kwargs: dict[str, Any], config: KubeConfig,
                                        words: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        _compile(_env_task(**env_kwargs), config)
    for word in words:
        assert word in str(info.value), str(info.value)
    assert info.value.fix


def test_a_clustered_pod_template_may_not_name_the_pods() -> None:
    env = ClusteredTaskEnvironment(name="named-pods", replicas=2, pod_template=shoal.PodTemplate(
        pod_spec={"subdomain": "mine"}))

    @env.task
    def work() -> int:
        raise NotImplementedError

    with pytest.raises(SpecError, match="master address"):
        _compile(work)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"store": "file:///tmp/store"}, "store"),
    ({"namespace": "ML_Research"}, "namespace"),
    ({"accelerators": {"H200": {"nvidia.com/gpu.product": "NVIDIA H200"}}}, "accelerators"),
    ({"ttl_seconds_after_finished": -1}, "ttl_seconds_after_finished"),
    ({"master_port": 70000}, "master_port"),
    ({"service_account": "Shoal_Driver"}, "service_account"),
    ({"default_queue": "not a queue"}, "default_queue"),
    ({"home": "relative/path"}, "home"),
    ({"launcher_command": ()}, "launcher_command"),
    ({"gpu_tolerations": ({"effect": "NoSchedule"},)}, "gpu_tolerations"),
])
def test_bad_config_is_named_with_a_fix(kwargs: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {"store": "s3://b"}
    with pytest.raises(SpecError) as info:
        KubeConfig(**{**base, **kwargs})
    assert info.value.field.startswith(f"KubeConfig.{field}")
    assert info.value.fix


def test_config_round_trips_through_json_and_rejects_unknown_keys() -> None:
    assert KubeConfig.from_json(SPOT_CONFIG.to_json()) == SPOT_CONFIG
    with pytest.raises(SpecError, match="not a KubeConfig field"):
        KubeConfig.from_dict({"store": "s3://b", "namespce": "x"})


@pytest.mark.parametrize(("uri", "file"), [
    ("file:///tmp/code.tar.gz", "a.py"), ("s3://b/c.tar.gz", "/abs/a.py"),
    ("s3://b/c.tar.gz", "../a.py"), ("s3://b/c.tar.gz", "a.txt"),
])
def test_code_bundle_must_be_in_the_store_with_a_relative_file(uri: str, file: str) -> None:
    with pytest.raises(SpecError):
        CodeBundle(uri=uri, file=file)


def test_no_container_sets_a_variable_twice() -> None:
    task = _env_task(env_vars={"PYTHONUNBUFFERED": "0", "DB_URL": "from-env-vars"},
                     secrets=[shoal.Secret(key="db-url", as_env_var="DB_URL")])
    job = _compile(task, dataclasses.replace(CONFIG, secret_name="s"))[0]
    env = _container(job)["env"]
    assert {"name": "DB_URL", "value": "from-env-vars"} in env  # env_vars win, as locally
    assert {"name": "PYTHONUNBUFFERED", "value": "1"} in env
    for obj in [job] + [o for objs in every_manifest().values() for o in objs if "spec" in o]:
        for container in _pod_spec(obj)["containers"]:
            names = [e["name"] for e in container.get("env", [])]
            assert len(names) == len(set(names)), (obj["metadata"]["name"], names)


# --- task.override ------------------------------------------------------------------------------

def test_an_overridden_call_compiles_with_its_own_resources_and_env_vars() -> None:
    over = seed_program.prepare.override(resources=shoal.Resources(cpu=3, memory="5Gi"),
                                         env_vars={"SHARDS_HINT": "8"})
    base_c, over_c = _container(_compile(seed_program.prepare)[0]), _container(_compile(over)[0])
    assert over_c["resources"]["requests"]["cpu"] == "3"
    assert over_c["resources"]["requests"]["memory"] == "5Gi"
    assert base_c["resources"] != over_c["resources"]
    assert {"name": "SHARDS_HINT", "value": "8"} in over_c["env"]
    assert all(e["name"] != "SHARDS_HINT" for e in base_c["env"])


def test_a_flyte_secret_is_its_key_given_as_its_variable() -> None:
    task = _env_task(secrets=[shoal.Secret("openai-key", as_env_var="OPENAI_API_KEY"),
                              "hf-token"])
    env = _container(_compile(task, dataclasses.replace(CONFIG, secret_name="s"))[0])["env"]
    assert {"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "s", "key": "openai-key"}}} in env
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "s", "key": "hf-token"}}} in env


def test_a_mounted_secret_is_a_file_of_a_secret_volume() -> None:
    task = _env_task(secrets=[shoal.Secret("DB-Pass", group="prod", mount="/etc/flyte/secrets"),
                              shoal.Secret("tls", mount="/etc/flyte/secrets")])
    job = _compile(task, dataclasses.replace(CONFIG, secret_name="s"))[0]
    assert {"name": "shoal-secrets", "secret": {"secretName": "s", "defaultMode": 0o400,
            "items": [{"key": "DB-Pass", "path": "prod/db-pass"},
                      {"key": "tls", "path": "tls"}]}} in _pod_spec(job)["volumes"]
    main = _container(job)
    assert {"name": "shoal-secrets", "mountPath": "/etc/flyte/secrets",
            "readOnly": True} in main["volumeMounts"]
    assert {"name": contract.SECRETS_DIR, "value": "/etc/flyte/secrets"} in main["env"]
    two = _env_task(secrets=[shoal.Secret("a", mount="/x"), shoal.Secret("b", mount="/y")])
    with pytest.raises(SpecError, match="share one mount path"):
        _compile(two, dataclasses.replace(CONFIG, secret_name="s"))
    with pytest.raises(SpecError, match="valid key of a Kubernetes Secret"):
        _compile(_env_task(secrets=shoal.Secret("a:b")),
                 dataclasses.replace(CONFIG, secret_name="s"))


def test_reuse_is_not_silently_dropped() -> None:
    with pytest.warns(UserWarning, match="ReusePolicy does not apply on Kubernetes"):
        _compile(_env_task(reusable=shoal.ReusePolicy(replicas=2)))


def test_max_queued_time_is_refused_on_kubernetes() -> None:
    env = shoal.TaskEnvironment(name="queued-k8s")

    @env.task(timeout=shoal.Timeout(max_runtime=60, max_queued_time=30))
    def work() -> int:
        return 1

    with pytest.raises(SpecError, match="local engine only"):
        _compile(work)


def test_progress_timeout_is_refused_on_kubernetes() -> None:
    env = ClusteredTaskEnvironment(name="hang-k8s", replicas=2,
                                   failure_policy=ClusterFailurePolicy(progress_timeout=60))

    @env.task
    def train() -> int:
        return 1

    with pytest.raises(SpecError, match=r"progress_timeout.*local engine only"):
        _compile(train)


def test_a_deadline_bounds_the_job_as_the_controller_lowers_each_attempt() -> None:
    env = shoal.TaskEnvironment(name="deadline-k8s")

    @env.task(timeout=shoal.Timeout(max_runtime=600, deadline=90))
    def work() -> int:
        return 1

    job = _compile(work)[0]
    assert job["spec"]["activeDeadlineSeconds"] == 90  # compiled alone: the first attempt's
    later = dataclasses.replace(call_of(work), task=dataclasses.replace(work.spec(),
                                                                        timeout=12.3))
    job = compile_call(later, run=RUN, action="a0.1", attempt=1, config=CONFIG, code=CODE)[0]
    assert job["spec"]["activeDeadlineSeconds"] == 13  # what the controller left it


# --- GPU placement: well-known products by default, the settings over them ----------------------

BARE = KubeConfig(store="s3://shoal-bucket/store", default_image="ghcr.io/example/shoal:0.1.0")


def _gpu_selector(gpu: Any, config: KubeConfig = BARE) -> dict[str, str] | None:
    spec = _pod_spec(_compile(_env_task(resources=shoal.Resources(gpu=gpu)), config)[0])
    selector: dict[str, str] | None = spec.get("nodeSelector")
    return selector


@pytest.mark.parametrize(("gpu", "product"), [
    ("H200:8", "NVIDIA-H200"),
    ("H100:8", "NVIDIA-H100-80GB-HBM3"),
    ("A100:8", "NVIDIA-A100-SXM4-40GB"),
    ("A100 80G:8", "NVIDIA-A100-SXM4-80GB"),  # Flyte's spelling reaches the same product
    ("L40s:1", "NVIDIA-L40S"),
    ("L4:1", "NVIDIA-L4"),
    ("A10G:1", "NVIDIA-A10G"),
    ("T4:1", "Tesla-T4"),
    ("V100:8", "Tesla-V100-SXM2-16GB"),
    ("B200:8", "NVIDIA-B200"),
    (shoal.GPU("A100", 1, partition="1g.5gb"), "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
])
def test_well_known_gpus_select_their_feature_discovery_product(gpu: Any, product: str) -> None:
    assert _gpu_selector(gpu) == {"nvidia.com/gpu.product": product}


def test_the_settings_accelerators_win_over_the_default_product() -> None:
    config = dataclasses.replace(BARE, accelerators={
        "H100": {"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"},
        "L4": {"cloud.google.com/gke-accelerator": "nvidia-l4"}})
    assert _gpu_selector("H100:2", config) == {"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}
    assert _gpu_selector("L4:1", config) == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert _gpu_selector("H200:8", config) == {"nvidia.com/gpu.product": "NVIDIA-H200"}


def test_an_unknown_gpu_renders_without_a_product_selector_and_warns_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_products, "_WARNED", set())
    with pytest.warns(UserWarning, match=r"'X9000'.*no product selector") as caught:
        first = _compile(_env_task(resources=shoal.Resources(gpu="X9000:2")), BARE)
        again = _compile(_env_task(resources=shoal.Resources(gpu="X9000:4")), BARE)
    assert [str(w.message).count("X9000") > 0 for w in caught] == [True]
    for obj in first + again:
        spec = _pod_spec(obj)
        assert "nodeSelector" not in spec
        assert _container(obj)["resources"]["limits"]["nvidia.com/gpu"] in ("2", "4")


def test_a_run_policys_ttl_is_the_jobsets_over_the_configs() -> None:
    from shoal.plugins.pytorch import Elastic, RunPolicy

    env = shoal.TaskEnvironment(name="ttl", plugin_config=Elastic(
        nnodes=2, nproc_per_node=1, run_policy=RunPolicy(ttl_seconds_after_finished=120)))

    @env.task
    def ttl_task() -> int:
        return 1

    jobset = next(o for o in _compile(ttl_task) if o["kind"] == "JobSet")
    assert jobset["spec"]["ttlSecondsAfterFinished"] == 120
    assert CONFIG.ttl_seconds_after_finished != 120
