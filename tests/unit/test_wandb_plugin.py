"""``shoal.plugins.wandb`` by value: Flyte's run_mode x rank_scope table, argument errors at
construction, the config's trip through the custom context, link URLs, the refusals of what
needs the W&B cloud, and the metrics stream a task's run claims. No W&B run is started here
(tests/process/test_wandb_plugin.py starts real ones in a gang)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import shoal
from shoal._runtime.context import TaskContext, running
from shoal._runtime.observe import metrics as rt
from shoal.errors import SpecError
from shoal.plugins.wandb import (
    Wandb,
    WandbSweep,
    download_wandb_run_dir,
    download_wandb_sweep_dirs,
    get_wandb_context,
    get_wandb_sweep_context,
    wandb_config,
    wandb_init,
    wandb_sweep,
    wandb_sweep_config,
)
from shoal.plugins.wandb.decorators import SweepScope, WandbInit
from shoal.plugins.wandb.topology import Placement, Topology, placement, topology

B = "r-1-a0"


def _rank(rank: int, nodes: int = 2, per_node: int = 2) -> Topology:
    return Topology(rank=rank, local_rank=rank % per_node, world_size=nodes * per_node,
                    local_world_size=per_node, worker_index=rank // per_node, num_workers=nodes)


def _ids(run_mode: str, rank_scope: str, nodes: int = 2) -> list[Placement]:
    return [placement(run_mode, rank_scope, _rank(r, nodes), B) for r in range(nodes * 2)]


def test_flytes_table_on_two_nodes_of_two_ranks() -> None:
    none = Placement(None)
    assert _ids("auto", "global") == [Placement(B), none, none, none]
    assert _ids("auto", "worker") == [Placement(f"{B}-worker-0"), none,
                                      Placement(f"{B}-worker-1"), none]
    shared = _ids("shared", "global")
    assert {p.run_id for p in shared} == {B}
    assert [(p.label, p.primary) for p in shared] == [
        ("worker-0-rank-0", True), ("worker-0-rank-1", False), ("worker-1-rank-0", False),
        ("worker-1-rank-1", False)]
    per_node = _ids("shared", "worker")
    assert [(p.run_id, p.primary) for p in per_node] == [
        (f"{B}-worker-0", True), (f"{B}-worker-0", False), (f"{B}-worker-1", True),
        (f"{B}-worker-1", False)]
    assert _ids("new", "global") == [Placement(f"{B}-rank-{r}", group=B) for r in range(4)]
    assert _ids("new", "worker") == [
        Placement(f"{B}-worker-{n}-rank-{lr}", group=f"{B}-worker-{n}")
        for n in (0, 1) for lr in (0, 1)]


def test_on_one_node_the_worker_scope_is_the_global_one() -> None:
    for run_mode in ("auto", "shared", "new"):
        assert _ids(run_mode, "worker", nodes=1) == _ids(run_mode, "global", nodes=1)
    assert [p.label for p in _ids("shared", "global", nodes=1)] == ["rank-0", "rank-1"]


def test_topology_comes_from_the_task_context() -> None:
    assert topology() is None  # outside a task
    c = TaskContext(run_name="r", action="a0", rank=3, local_rank=1, world_size=4,
                    local_world_size=2, node_rank=1, nnodes=2)
    assert topology(c) == _rank(3)
    with running(c):
        assert shoal.ctx().rank == 3 and topology() == _rank(3)
    assert (c.action.name, c.action.run_name) == ("a0", "r")  # Flyte's ctx().action
    assert c.action == "a0" and pickle.loads(pickle.dumps(c.action)).run_name == "r"
    ray_driver = TaskContext(run_name="r", action="a0", rank=0, world_size=1, nnodes=3)
    assert topology(ray_driver) is None  # one process: not distributed


@pytest.mark.parametrize(("build", "field", "says"), [
    (lambda: wandb_init(run_mode="nwe"), "run_mode", "did you mean 'new'"),
    (lambda: wandb_init(rank_scope="node"), "rank_scope", "'global', 'worker'"),
    (lambda: wandb_init(download_logs="yes"), "download_logs", "True, False or None"),
    (lambda: wandb_init(project=""), "project", "non-empty string"),
    (lambda: wandb_init(tag=["x"]), "tag", "did you mean 'tags'"),
    (lambda: wandb_sweep(method="grid"), "method", "not an argument of wandb.sweep"),
    (lambda: wandb_config(mode="onlin"), "mode", "did you mean 'online'"),
    (lambda: wandb_config(tags="solo"), "tags", "a list of strings"),
    (lambda: wandb_config(config={"f": object()}), "config", "JSON-serializable"),
    (lambda: wandb_config(run_mode="shard"), "run_mode", "did you mean 'shared'"),
    (lambda: wandb_config(notez="x"), "notez", "did you mean 'notes'"),
    (lambda: wandb_sweep_config(method="bayesian"), "method", "did you mean 'bayes'"),
    (lambda: Wandb(rank_scope="all"), "rank_scope", "must be one of"),
])
def test_bad_arguments_are_refused_when_written(build: object, field: str, says: str) -> None:
    with pytest.raises(SpecError) as e:
        build()  # type: ignore[operator]
    assert field in e.value.field and says in str(e.value), str(e.value)
    assert "Fix:" in str(e.value)


def test_the_decorators_add_a_scope_and_links_to_the_task() -> None:
    env = shoal.TaskEnvironment(name="wandb_unit_env")

    @env.task
    def train(x: int) -> int:
        return x

    decorated = wandb_init(project="p", run_mode="new", notes="n")(train)
    assert decorated is not train and decorated.func is train.func  # the function is kept
    assert decorated.scopes == (WandbInit(run_mode="new", init_kwargs={"notes": "n",
                                                                       "project": "p"}),)
    assert env.tasks["train"] is decorated  # the environment's task is the decorated one
    assert decorated.spec().links == ("Weights & Biases",)
    swept = wandb_sweep(decorated)
    assert swept.scopes == (*decorated.scopes, SweepScope())
    assert swept.spec().links == ("Weights & Biases", "Weights & Biases Sweep")
    assert decorated(3) == 3  # outside a run: the plain function, no W&B
    relinked = train.override(links=(Wandb(project="p", entity="e"), "https://x"))
    assert relinked.spec().links == ("Weights & Biases", "https://x")  # Flyte's override
    with pytest.raises(SpecError, match="decorates tasks only"):
        wandb_sweep(lambda: None)


def test_configs_travel_as_custom_context_strings() -> None:
    config = wandb_config(project="p", tags=["a", "b"], config={"lr": 0.1},
                          run_mode="shared", notes="hi")
    both = {**config, **wandb_sweep_config(method="grid", parameters={"x": {"values": [1]}})}
    assert both["wandb_project"] == "p" and both["wandb_tags"] == '["a", "b"]'
    assert both["wandb_kwargs"] == '{"notes": "hi"}' and both["wandb_sweep_method"] == "grid"
    assert get_wandb_context() is None
    with shoal.custom_context(**both):
        read = get_wandb_context()
        assert read is not None and read.tags == ["a", "b"] and read.run_mode == "shared"
        assert read.init_kwargs() == {"notes": "hi", "project": "p", "tags": ["a", "b"],
                                      "config": {"lr": 0.1}}
        sweep = get_wandb_sweep_context()
        assert sweep is not None and sweep.to_sweep_config() == {
            "method": "grid", "parameters": {"x": {"values": [1]}}}
        with wandb_config(project="123", rank_scope="worker"):  # a block over the context
            inner = get_wandb_context()  # its keys win (run_mode's default too), others stay
            assert inner is not None and (inner.project, inner.rank_scope, inner.run_mode,
                                          inner.tags) == ("123", "worker", "auto", ["a", "b"])
        assert get_wandb_context().project == "p"  # type: ignore[union-attr]
    with shoal.custom_context(wandb_projekt="x"), pytest.raises(SpecError, match="projekt"):
        get_wandb_context()


def test_links_follow_flytes_urls() -> None:
    args = {"run_name": "r-1", "project": "", "domain": "", "parent_action_name": "",
            "action_name": "a0", "pod_name": ""}
    ctx = {"wandb_project": "p", "wandb_entity": "e"}
    assert Wandb().get_link(context={}, **args) == "https://wandb.ai"
    assert Wandb().get_link(context=ctx, **args) == "https://wandb.ai/e/p/runs/r-1-a0"
    child = {**ctx, "_wandb_run_id": "parent-run"}
    assert Wandb().get_link(context=child, **args).endswith("/runs/parent-run")
    assert Wandb(run_mode="new").get_link(context=child, **args).endswith("/runs/r-1-a0")
    node = Wandb(run_mode="new", rank_scope="worker", _is_distributed=True, _worker_index=1)
    assert node.get_link(context=ctx, **args).endswith("/e/p/groups/r-1-a0-worker-1")
    assert WandbSweep().get_link(context={**ctx, "_wandb_sweep_id": "s1"},
                                 **args) == "https://wandb.ai/e/p/sweeps/s1"


def test_what_needs_the_cloud_refuses_offline_in_one_line() -> None:
    with wandb_config(mode="offline"):
        for call in (lambda: download_wandb_run_dir("r-1-a0"),
                     lambda: download_wandb_sweep_dirs("s1")):
            with pytest.raises(SpecError) as e:
                call()
            assert "needs the W&B cloud" in str(e.value) and "\n" not in str(e.value)


def test_a_plain_function_in_a_task_without_a_run_is_refused() -> None:
    @wandb_init
    def helper() -> int:
        return 1

    with running(TaskContext(run_name="r", action="a0")), \
            pytest.raises(SpecError, match="this task has none"):
        helper()


def test_a_claimed_stream_and_a_failing_mirror(tmp_path: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    with rt.metrics_scope(str(tmp_path), "run-1", "a0", 0, restart=0, rank=2) as writer:
        rt.claim_stream(writer.path, "wandb", {"run_id": "x"})
        got: list[tuple[str, int, float, float]] = []
        writer.on_flush = got.extend
        shoal.log_metrics({"loss": 1.0}, step=4)
        writer.flush()
        assert [(n, s, v) for n, s, _, v in got] == [("loss", 4, 1.0)]

        def broken(points: object) -> None:
            raise RuntimeError("wandb went away")

        writer.on_flush = broken
        shoal.log_metrics({"loss": 2.0}, step=5)
        writer.flush()
        assert writer.on_flush is None  # switched off, once
    assert "no longer mirrored" in capfd.readouterr().err
    assert rt.claimed(tmp_path, "run-1", "a0", 0, 2, "wandb")
    assert not rt.claimed(tmp_path, "run-1", "a0", 0, 1, "wandb")
    assert not rt.claimed(tmp_path, "run-1", "a0", 0, None, "wandb")
    from shoal._storage.metrics import RunMetrics

    m = RunMetrics(tmp_path, "run-1")
    m.refresh()
    assert list(m.series(name="loss")[0].values) == [1.0, 2.0]  # both on disk all the same


def test_importing_and_decorating_leave_wandb_unimported() -> None:
    """wandb (a second of imports) loads only in a process that runs a decorated body."""
    import subprocess
    import sys

    code = ("import sys, shoal\nfrom shoal.plugins.wandb import wandb_config, wandb_init\n"
            "env = shoal.TaskEnvironment(name='lazy')\n"
            "@wandb_init(project='p')\n@env.task\ndef f() -> int:\n    return 1\n"
            "with wandb_config(project='q'):\n    pass\n"
            "print('wandb' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
