"""Bad input for an elastic gang gets one clear error before anything runs, naming the field,
the value, the rule and the fix: Flyte's ``Elastic`` (shoal.plugins.pytorch), Shoal's
``ClusteredTaskEnvironment(min_replicas=)``, ``plugin_config=`` of another object; the JobSets of
an elastic gang's starts on Kubernetes and Slurm's plan of one (their compile steps are pure,
so they run here; no Slurm, no cluster), and ``--override`` of an ``Elastic`` environment.
A gang larger than this machine is refused in test_bounds.py, where the other bounds are."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._api.plugin_config import PROVIDED
from shoal._engines.base import AttemptRef
from shoal._engines.kubernetes import compile_call
from shoal._engines.kubernetes.engine import KubernetesEngine
from shoal._engines.slurm.config import settings_from_mapping
from shoal._engines.slurm.engine import SlurmEngine
from shoal._spec.call import CallSpec
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy
from shoal.errors import SpecError
from shoal.plugins.pytorch import Elastic, RunPolicy
from tests.kubernetes.conftest import CODE, CONFIG

RUN = "r-20261204-0200-abcd"
FIX = 'e.g. nnodes=2 (a fixed gang) or nnodes="1:2" (elastic: 1 to 2 nodes)'


def _refused(make: Any) -> SpecError:
    with pytest.raises(SpecError) as err:
        make()
    return err.value


# --- Elastic(...) ---------------------------------------------------------------------------


@pytest.mark.parametrize(("nnodes", "rule", "fix"), [
    ("3:2", "MIN (3) must be <= MAX (2)", 'e.g. nnodes="2:3"'),
    ("0:2", "needs at least 1 node (MIN >= 1)", FIX),
    ("a:b", 'must be an int or "MIN:MAX" with MIN and MAX whole numbers', FIX),
    ("-1:2", "whole numbers", FIX),
    ("1:2:3", "whole numbers", FIX),
    ("", "whole numbers", FIX),
    (0, "needs at least 1 node", FIX),
    (2.0, 'must be an int or a "MIN:MAX" string', FIX),
    (True, 'must be an int or a "MIN:MAX" string', FIX),
])
def test_a_bad_nnodes_is_refused_naming_it(nnodes: object, rule: str, fix: str) -> None:
    e = _refused(lambda: Elastic(nnodes=nnodes, nproc_per_node=1))  # type: ignore[arg-type]
    assert (e.field, e.value) == ("Elastic.nnodes", nnodes)
    assert rule in e.rule and e.fix == fix
    assert str(e).startswith("Elastic.nnodes=")


@pytest.mark.parametrize(("nnodes", "bounds"), [(2, (2, 2)), ("2", (2, 2)), ("1:2", (1, 2)),
                                                (" 1 : 4 ", (1, 4))])
def test_a_good_nnodes_gives_its_bounds(nnodes: int | str, bounds: tuple[int, int]) -> None:
    e = Elastic(nnodes=nnodes, nproc_per_node=1)
    assert (e.min_nodes, e.max_nodes) == bounds


@pytest.mark.parametrize(("kwargs", "field", "rule", "fix"), [
    ({"max_restarts": -1}, "Elastic.max_restarts", "must be an int >= 0", "e.g. max_restarts=3"),
    ({"nproc_per_node": 0}, "Elastic.nproc_per_node", "must be an int >= 1",
     "e.g. nproc_per_node=8"),
    ({"nproc_per_node": -2}, "Elastic.nproc_per_node", "must be an int >= 1",
     "e.g. nproc_per_node=8"),
    ({"nproc_per_node": 2000}, "Elastic.nproc_per_node", "must be at most 1,024",
     "e.g. nproc_per_node=8"),
    ({"monitor_interval": 0}, "Elastic.monitor_interval", "must be an int >= 1",
     "e.g. monitor_interval=3"),
])
def test_a_bad_count_is_refused_naming_it(kwargs: dict[str, Any], field: str, rule: str,
                                          fix: str) -> None:
    e = _refused(lambda: Elastic(**{"nnodes": 2, "nproc_per_node": 1, **kwargs}))
    assert e.field == field and e.value == next(iter(kwargs.values()))
    assert rule in e.rule and e.fix == fix


# --- ClusteredTaskEnvironment(min_replicas=) ------------------------------------------------


@pytest.mark.parametrize(("min_replicas", "rule", "fix"), [
    (0, "must be an int >= 1", "e.g. min_replicas=1"),
    (-1, "must be an int >= 1", "e.g. min_replicas=1"),
    ("1", "must be an int >= 1", "e.g. min_replicas=1"),
    (3, "must be <= replicas (2)", "use min_replicas=2, or replicas=3"),
])
def test_min_replicas_out_of_range_is_refused_naming_it(min_replicas: object, rule: str,
                                                        fix: str) -> None:
    e = _refused(lambda: ClusteredTaskEnvironment(
        "el-range", replicas=2, min_replicas=min_replicas))  # type: ignore[arg-type]
    assert (e.field, e.value) == ("ClusteredTaskEnvironment('el-range').min_replicas",
                                  min_replicas)
    assert rule in e.rule and e.fix == fix


def test_both_spellings_of_an_elastic_gang_make_one_cluster_spec() -> None:
    flyte = shoal.TaskEnvironment("el-same", plugin_config=Elastic(
        nnodes="1:2", nproc_per_node=1, max_restarts=0)).spec().cluster
    native = ClusteredTaskEnvironment("el-same", replicas=2, min_replicas=1).spec().cluster
    assert flyte is not None and native is not None
    assert (flyte.replicas, flyte.min_replicas, flyte.elastic) == (2, 1, True)
    assert (native.replicas, native.min_replicas, native.elastic) == (2, 1, True)


# --- plugin_config= of another object -------------------------------------------------------


def _foreign(module: str, name: str) -> object:
    kind = type(name, (), {})
    kind.__module__ = module
    return kind()


@pytest.mark.parametrize(("config", "fix"), [
    (object(), "use shoal.clustered.ClusteredTaskEnvironment for multi-node torch/JAX"),
    ({"nnodes": 2}, "use shoal.clustered.ClusteredTaskEnvironment"),
    (_foreign("flyteplugins.pytorch.task", "Elastic"),
     "`from shoal.plugins.pytorch import Elastic` (rename `flyteplugins.` to `shoal.plugins.`"),
    (_foreign("flyteplugins.spark.task", "Spark"),
     "Shoal has no counterpart of flyteplugins.spark.task.Spark"),
    (RunPolicy(backoff_limit=1), "a RunPolicy goes inside the Elastic config"),
])
def test_another_plugin_config_is_refused_naming_shoals_plugins(config: object,
                                                                fix: str) -> None:
    e = _refused(lambda: shoal.TaskEnvironment("el-plugin", plugin_config=config))
    assert e.field == "TaskEnvironment('el-plugin').plugin_config" and e.value is config
    assert PROVIDED == ("shoal.plugins.pytorch.Elastic", "shoal.plugins.ray.RayJobConfig",
                        "shoal.plugins.echo.Echo", "shoal.extras.Sleep")
    assert ("must be one of Shoal's plugin configs (shoal.plugins.pytorch.Elastic, "
            "shoal.plugins.ray.RayJobConfig, shoal.plugins.echo.Echo, shoal.extras.Sleep)"
            ) in e.rule
    assert fix in str(e.fix)


def test_a_gang_made_twice_is_refused() -> None:
    e = _refused(lambda: ClusteredTaskEnvironment(
        "el-twice", replicas=2, plugin_config=Elastic(nnodes=2, nproc_per_node=1)))
    assert e.field == "ClusteredTaskEnvironment('el-twice').plugin_config"
    assert "makes a gang, and so does this environment" in e.rule


# --- --override of an Elastic environment ---------------------------------------------------


def _elastic_env(name: str, nnodes: int | str = "2:4") -> shoal.TaskEnvironment:
    return shoal.TaskEnvironment(name, plugin_config=Elastic(nnodes=nnodes, nproc_per_node=2))


@pytest.mark.parametrize(("nnodes", "field", "value", "bounds"), [
    ("2:4", "min_replicas", 1, (1, 4, 2)),
    ("2:4", "min_replicas", 4, (4, 4, 2)),  # MIN = MAX: a fixed gang
    ("2:4", "replicas", 3, (2, 3, 2)),
    (2, "replicas", 3, (3, 3, 2)),  # a fixed gang stays fixed
    (2, "min_replicas", 1, (1, 2, 2)),  # ... unless given a MIN
    ("2:4", "nproc_per_node", 1, (2, 4, 1)),
])
def test_an_override_of_an_elastic_environment_changes_its_gang(
        nnodes: int | str, field: str, value: int, bounds: tuple[int, int, int]) -> None:
    env = _elastic_env("el-ovr", nnodes)
    assert env.gang() is not None
    env.override(field, value)
    c = env.spec().cluster
    assert c is not None and (c.min_nodes, c.replicas, c.nproc_per_node) == bounds


def test_a_refused_override_of_an_elastic_environment_changes_nothing() -> None:
    env = _elastic_env("el-ovr-bad")
    e = _refused(lambda: env.override("min_replicas", 5))
    assert e.field == "Elastic.nnodes" and e.value == "5:4" and "MIN (5) must be <= MAX" in e.rule
    e = _refused(lambda: env.override("max_restarts", 1))
    assert "only replicas (MAX nodes), min_replicas (MIN nodes) and nproc_per_node" in e.rule
    c = env.spec().cluster
    assert c is not None and (c.min_nodes, c.replicas) == (2, 4)


def test_an_override_of_an_environment_without_a_gang_is_refused() -> None:
    env = shoal.TaskEnvironment("el-plain")
    assert env.gang() is None
    e = _refused(lambda: env.override("replicas", 2))
    assert e.field == "--override" and "not as a gang" in e.rule


# --- Kubernetes compiles each start as a JobSet of its size; Slurm plans MIN-MAX -------------


def _call(env: shoal.TaskEnvironment) -> CallSpec:
    @env.task
    def train() -> int:
        return 0

    return CallSpec(task=train.spec(), inputs={}, parent_action="a0")


def _slurm(tmp_path: Path) -> SlurmEngine:
    settings = settings_from_mapping({"partition": "batch", "python": "/opt/venv/bin/python"},
                                     "slurm.yaml")
    return SlurmEngine(run=RUN, home=tmp_path / "home", store="file:///shared/store",
                       settings=settings)


def _sbatch(tmp_path: Path, env: shoal.TaskEnvironment) -> str:
    ref = AttemptRef(RUN, "a0.1", 0, tmp_path / "home" / "runs" / RUN / "a0.1.0.log")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _slurm(tmp_path).job_plan(_call(env), ref).script


def _manifests(env: shoal.TaskEnvironment) -> list[dict[str, Any]]:
    return compile_call(_call(env), run=RUN, action="a0.1", attempt=0, config=CONFIG, code=CODE)


ELASTIC_SPELLINGS = [
    lambda: shoal.TaskEnvironment("el-eng", plugin_config=Elastic(nnodes="1:2",
                                                                  nproc_per_node=1)),
    lambda: ClusteredTaskEnvironment("el-eng", replicas=2, min_replicas=1),
]


def _env_of(jobset: dict[str, Any]) -> dict[str, Any]:
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in job["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("make", ELASTIC_SPELLINGS)
def test_kubernetes_compiles_an_elastic_gangs_first_start_at_max_nodes(make: Any) -> None:
    """One JobSet of MAX nodes that never restarts itself (the engine starts the next one, of
    the nodes left), its pods told the start's size, number and the gang's bounds as values;
    not refused when the run is planned."""
    (js,) = _manifests(make())
    job = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"]) == (2, 2)
    assert js["spec"]["failurePolicy"] == {"maxRestarts": 0,
                                           "restartStrategy": "BlockingRecreate"}
    assert "podFailurePolicy" not in job
    env = _env_of(js)
    assert (env[contract.NNODES], env[contract.RESTART_ATTEMPT], env[contract.MIN_NNODES],
            env[contract.MAX_NNODES]) == ("2", "0", "1", "2")
    assert contract.START_CAUSE not in env  # "first_start", the launcher's default
    assert js["metadata"]["labels"]["shoal.dev/restart"] == "0"
    KubernetesEngine(run=RUN, config=CONFIG, code=CODE).check_envs([make().spec()])


def test_kubernetes_compiles_a_shrunk_start_as_a_jobset_of_its_own() -> None:
    from shoal._engines.kubernetes import Start

    env = ELASTIC_SPELLINGS[1]()
    call = _call(env)
    first, = compile_call(call, run=RUN, action="a0.1", attempt=0, config=CONFIG, code=CODE)
    shrunk, = compile_call(call, run=RUN, action="a0.1", attempt=0, config=CONFIG, code=CODE,
                           start=Start(restart=1, nnodes=1, cause="node_lost"))
    assert shrunk["metadata"]["name"] != first["metadata"]["name"]
    job = shrunk["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"]) == (1, 1)
    env = _env_of(shrunk)
    assert (env[contract.NNODES], env[contract.RESTART_ATTEMPT], env[contract.START_CAUSE],
            env[contract.MIN_NNODES], env[contract.MAX_NNODES]) == ("1", "1", "node_lost", "1",
                                                                   "2")
    name = shrunk["metadata"]["name"]
    assert env[contract.MASTER_ADDR] == f"{name}-node-0-0.{name}"  # its own node 0
    with pytest.raises(ValueError, match=r"Start\.cause 'lost'"):
        Start(restart=1, nnodes=1, cause="lost")


@pytest.mark.parametrize("make", ELASTIC_SPELLINGS)
def test_slurm_plans_an_elastic_gang_as_one_allocation_of_min_to_max_nodes(
        tmp_path: Path, make: Any) -> None:
    """As many nodes as are free from MIN to MAX (MAX tasks spread over them), kept when one
    fails (--no-kill); the bounds reach the allocation program, which resizes the steps."""
    script = _sbatch(tmp_path, make())
    for line in ("#SBATCH --nodes=1-2", "#SBATCH --ntasks=2", "#SBATCH --spread-job",
                 "#SBATCH --no-kill", f"export {contract.MIN_NNODES}=1",
                 f"export {contract.MAX_NNODES}=2"):
        assert line in script.splitlines(), (line, script)
    assert "--ntasks-per-node" not in script
    _slurm(tmp_path).check_envs([make().spec()])  # not refused


def test_an_override_of_min_replicas_to_max_makes_the_gang_fixed(tmp_path: Path) -> None:
    env = ELASTIC_SPELLINGS[0]()
    env.override("min_replicas", 2)
    assert _manifests(env)[0]["kind"] == "JobSet"
    assert "--nodes=2" in _sbatch(tmp_path, env)


# Elastic's defaults, in ClusteredTaskEnvironment's words: 3 restarts, its NCCL variables.
NATIVE = {"failure_policy": ClusterFailurePolicy(max_restarts=3),
          "env_vars": {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300",
                       "TORCH_NCCL_ENABLE_MONITORING": "1"}}


def _fixed_pair() -> tuple[Any, Any]:
    def flyte() -> shoal.TaskEnvironment:
        return shoal.TaskEnvironment("el-fixed", plugin_config=Elastic(nnodes=2,
                                                                       nproc_per_node=1))

    def native() -> shoal.TaskEnvironment:
        return ClusteredTaskEnvironment("el-fixed", replicas=2, nproc_per_node=1, **NATIVE)

    return flyte, native


def test_a_fixed_elastic_compiles_to_the_jobset_of_replicas_2() -> None:
    flyte, native = _fixed_pair()
    compiled = _manifests(flyte())
    assert compiled == _manifests(native())
    assert compiled[0]["kind"] == "JobSet"


def test_a_fixed_elastic_plans_the_sbatch_script_of_replicas_2(tmp_path: Path) -> None:
    flyte, native = _fixed_pair()
    script = _sbatch(tmp_path, flyte())
    assert script == _sbatch(tmp_path, native())
    assert "--nodes=2" in script


def test_run_policy_ttl_is_the_jobsets() -> None:
    env = shoal.TaskEnvironment("el-ttl", plugin_config=Elastic(
        nnodes=2, nproc_per_node=1, run_policy=RunPolicy(ttl_seconds_after_finished=60)))
    assert _manifests(env)[0]["spec"]["ttlSecondsAfterFinished"] == 60
    assert CONFIG.ttl_seconds_after_finished != 60


@pytest.mark.parametrize(("make", "sizes", "bounds"), [
    (lambda: _elastic_env("el-pod", "1:4"),
     {"replicas": 2, "nproc_per_node": 2, "min_replicas": 2}, (2, 2, 2)),
    (lambda: ClusteredTaskEnvironment("el-pod", replicas=4, min_replicas=3, nproc_per_node=2),
     {"replicas": 2, "nproc_per_node": 1, "min_replicas": 2}, (2, 2, 1)),  # MAX under MIN
    (lambda: ClusteredTaskEnvironment("el-pod", replicas=2, nproc_per_node=2),
     {"replicas": 4, "nproc_per_node": 2}, (4, 4, 2)),  # a topology of before min_replicas
])
def test_the_driver_pod_sizes_a_gang_of_either_spelling_as_submitted(
        make: Any, sizes: dict[str, int], bounds: tuple[int, int, int]) -> None:
    """The submitter's ``--override`` reaches the driver pod as topology.json; the fixed size
    an elastic refusal asks for (``min_replicas=replicas``) must arrive there too."""
    from shoal._driver.pod import resize_gangs
    from shoal._driver.remote import topology

    env = make()
    resize_gangs(_call_task(env), {"el-pod": sizes})
    c = env.gang()
    assert c is not None and (c.min_nodes, c.replicas, c.nproc_per_node) == bounds
    assert topology([env.spec()]) == {"el-pod": {"replicas": bounds[1], "min_replicas": bounds[0],
                                                 "nproc_per_node": bounds[2]}}


def _call_task(env: shoal.TaskEnvironment) -> Any:
    @env.task
    def train() -> int:
        return 0

    return train
