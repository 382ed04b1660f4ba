"""Bounds on what a spec may ask for, refused where it is written or before a run is recorded:
a gang no cluster has (finding 5), a gang this machine cannot run on the local engine, an
accelerator asked for zero times (finding 6), and quantities no machine has."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shoal
from shoal import _contract as contract
from shoal._api.resources import MAX_CPU, MAX_GPU, MAX_MEMORY
from shoal._engines.local.gangs.limits import RANK_MEMORY, check_gang, fitting_nodes, most_ranks
from shoal._engines.local.pool import Request
from shoal._storage.records import Records
from shoal.cli.main import main
from shoal.clustered import MAX_NPROC_PER_NODE, MAX_REPLICAS, ClusteredTaskEnvironment
from shoal.errors import SpecError
from shoal.plugins.pytorch import Elastic

GiB = 2**30


def _gang(name: str, replicas: int, nproc: int) -> Any:
    return ClusteredTaskEnvironment(name, replicas=replicas, nproc_per_node=nproc).spec()


# --- finding 5: a gang no cluster has -------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("nproc_per_node", 10**9),
                                              ("nproc_per_node", MAX_NPROC_PER_NODE + 1),
                                              ("replicas", MAX_REPLICAS + 1)])
def test_a_gang_larger_than_any_cluster_is_refused_where_it_is_written(field: str,
                                                                        value: int) -> None:
    with pytest.raises(SpecError) as err:
        ClusteredTaskEnvironment("huge", **{field: value})  # type: ignore[arg-type]
    assert err.value.field == f"ClusteredTaskEnvironment('huge').{field}"
    assert err.value.value == value and "must be at most" in err.value.rule


def test_the_largest_gang_a_cluster_has_is_accepted() -> None:
    spec = ClusteredTaskEnvironment("edge", replicas=MAX_REPLICAS,
                                    nproc_per_node=MAX_NPROC_PER_NODE).spec().cluster
    assert spec is not None and spec.world_size == MAX_REPLICAS * MAX_NPROC_PER_NODE


def test_an_override_past_the_bound_is_refused_and_changes_nothing() -> None:
    env = ClusteredTaskEnvironment("ovr", replicas=2, nproc_per_node=2)
    with pytest.raises(SpecError, match="must be at most"):
        env.override("nproc_per_node", 10**9)
    assert env.nproc_per_node == 2


@pytest.mark.parametrize("seconds", [math.nan, math.inf])
def test_a_timeout_that_is_not_finite_is_refused(seconds: float) -> None:
    with pytest.raises(SpecError, match="not inf or nan"):
        shoal.clustered.ClusterFailurePolicy(collective_timeout=seconds)


# --- a gang larger than this machine, on the local engine -----------------------------------

ONE_GIB = Request(cpu=2.0, memory=GiB, gpu=0)  # room for 4 ranks of RANK_MEMORY


def test_more_ranks_than_cpus_is_normal() -> None:
    check_gang(_gang("seed", 2, 2), ONE_GIB, open_files=1024)  # the seed's 2x2 on 2 CPUs


def test_a_gang_past_the_machines_memory_is_refused_with_the_override_that_fits() -> None:
    with pytest.raises(SpecError) as err:
        check_gang(_gang("pretrain", 2, 3), ONE_GIB, open_files=1024)
    e = err.value
    assert e.field == "ClusteredTaskEnvironment('pretrain').nproc_per_node" and e.value == 3
    assert "6 ranks" in e.rule and "at most 4" in e.rule and "memory=1.0Gi" in e.rule
    assert "--override pretrain.nproc_per_node=2" in str(e.fix)


def test_a_gang_past_the_open_files_limit_is_refused() -> None:
    big = Request(cpu=64.0, memory=1024 * GiB, gpu=0)
    assert most_ranks(big, 256) == (192, most_ranks(big, 256)[1])
    with pytest.raises(SpecError, match=r"ulimit -n is 256") as err:
        check_gang(_gang("files", 4, 64), big, open_files=256)
    assert "--override files.nproc_per_node=48" in str(err.value.fix)


def test_more_nodes_than_ranks_allowed_asks_for_fewer_nodes() -> None:
    with pytest.raises(SpecError) as err:
        check_gang(_gang("wide", 8, 1), Request(cpu=2.0, memory=4 * RANK_MEMORY, gpu=0),
                   open_files=None)
    assert "--override wide.replicas=4 --override wide.nproc_per_node=1" in str(err.value.fix)


def test_more_nodes_than_loopback_addresses_is_refused() -> None:
    with pytest.raises(SpecError, match=r"at most 254 nodes") as err:
        check_gang(_gang("many", 255, 1), Request(cpu=2.0, memory=1024 * GiB, gpu=0))
    assert err.value.field.endswith(".replicas")


# An elastic gang is admitted once its MIN nodes fit: MIN is what must fit here.
ELASTIC_FIELD = ("environment 'stretch': min_replicas (the MIN of Elastic(nnodes=\"MIN:MAX\"), "
                 "ClusteredTaskEnvironment(min_replicas=))")


def _elastic(low: int, high: int, nproc: int) -> Any:
    return ClusteredTaskEnvironment("stretch", replicas=high, min_replicas=low,
                                    nproc_per_node=nproc).spec()


def test_an_elastic_gang_that_fits_at_min_but_not_at_max_is_accepted_and_starts_smaller(
        ) -> None:
    gang = _elastic(1, 4, 2)  # 8 ranks at MAX, 2 at MIN; room for 4
    check_gang(gang, ONE_GIB, open_files=1024)
    assert gang.cluster is not None and fitting_nodes(gang.cluster, ONE_GIB, 1024) == 2
    flyte = shoal.TaskEnvironment("stretch", plugin_config=Elastic(
        nnodes="1:4", nproc_per_node=2)).spec()
    check_gang(flyte, ONE_GIB, open_files=1024)


def test_an_elastic_gang_whose_min_does_not_fit_is_refused_naming_min_replicas() -> None:
    with pytest.raises(SpecError) as err:
        check_gang(_elastic(3, 4, 2), ONE_GIB, open_files=1024)
    e = err.value
    assert (e.field, e.value) == (ELASTIC_FIELD, 3)
    assert e.rule.startswith("the elastic gang starts once 3 nodes fit: 3 x nproc_per_node=2 "
                             "is 6 ranks; the local engine runs at most 4 on this machine")
    assert str(e.fix).startswith("--override stretch.min_replicas=2 (it grows to replicas=4")
    check_gang(_elastic(2, 4, 2), ONE_GIB, open_files=1024)  # the fix fits


def test_an_elastic_gang_whose_one_node_does_not_fit_asks_for_fewer_ranks_per_node() -> None:
    with pytest.raises(SpecError) as err:
        check_gang(_elastic(1, 2, 8), ONE_GIB, open_files=1024)
    fix = "--override stretch.min_replicas=1 --override stretch.nproc_per_node=4"
    assert str(err.value.fix).startswith(fix)


def test_an_elastic_gang_past_the_loopback_addresses_at_max_only_is_accepted() -> None:
    roomy = Request(cpu=2.0, memory=1024 * GiB, gpu=0)
    gang = _elastic(2, 300, 1)
    check_gang(gang, roomy, open_files=None)
    assert gang.cluster is not None and fitting_nodes(gang.cluster, roomy, None) == 254
    with pytest.raises(SpecError, match=r"runs at most 254") as err:
        check_gang(_elastic(255, 300, 1), roomy, open_files=None)
    assert err.value.field == ELASTIC_FIELD and err.value.value == 255
    assert str(err.value.fix).startswith("--override stretch.min_replicas=254")


PROGRAM = """
    import shoal
    from shoal.clustered import ClusteredTaskEnvironment

    gang = ClusteredTaskEnvironment("{name}", replicas=2, nproc_per_node=8)

    @gang.task
    def train() -> int:
        return 0
"""


def _program(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(PROGRAM.format(name=name)))
    return path


def test_dry_run_refuses_a_gang_larger_than_the_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        shoal_home: Path) -> None:
    """Finding 5 on the local engine: it passed --dry-run and was admitted as one CPU."""
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=2,memory=1Gi")
    program = _program(tmp_path, "drygang")
    assert main(["run", str(program), "train", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "ClusteredTaskEnvironment('drygang').nproc_per_node=8" in err
    assert "--override drygang.nproc_per_node=2" in err
    assert main(["run", str(program), "train", "--dry-run",
                 "--override", "drygang.nproc_per_node=2"]) == 0


def test_a_run_of_a_gang_larger_than_the_machine_is_refused_before_it_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shoal_home: Path) -> None:
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=2,memory=1Gi")
    assert main(["run", str(_program(tmp_path, "rungang")), "train"]) == 2
    assert Records(shoal_home / "shoal.db").list_runs(limit=10) == []


ELASTIC_PROGRAM = """
    import shoal
    from shoal.plugins.pytorch import Elastic

    env = shoal.TaskEnvironment("{name}", plugin_config=Elastic(nnodes="4:8", nproc_per_node=1))

    @env.task
    def train() -> int:
        return 0
"""


def test_the_override_an_elastic_refusal_names_is_taken_by_the_cli(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        shoal_home: Path) -> None:
    """A Flyte ``Elastic`` environment whose MIN is past the machine: the fix the error names
    (``--override ENV.min_replicas=N``) is one ``shoal run`` takes."""
    monkeypatch.setenv(contract.MACHINE_CAPACITY, "cpu=8,memory=768Mi")  # 3 ranks, 8 CPUs
    program = tmp_path / "dryelastic.py"
    program.write_text(textwrap.dedent(ELASTIC_PROGRAM.format(name="dryelastic")))
    assert main(["run", str(program), "train", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "min_replicas (the MIN of Elastic" in err and "=4: the elastic gang starts" in err
    assert "--override dryelastic.min_replicas=3" in err
    assert main(["run", str(program), "train", "--dry-run",
                 "--override", "dryelastic.min_replicas=3"]) == 0


# --- finding 6: an accelerator asked for zero times -----------------------------------------


def test_an_accelerator_with_a_count_of_zero_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        shoal.Resources(gpu="H200:0")
    assert err.value.field == "gpu" and err.value.value == "H200:0"
    assert "pinned to H200 nodes" in err.value.rule
    assert 'drop gpu= or ask for at least 1: gpu="H200:1"' in str(err.value.fix)
    with pytest.raises(SpecError, match=">= 1"):
        shoal.GPU("H200", 0)


def test_gpu_zero_without_an_accelerator_means_none() -> None:
    r = shoal.Resources(gpu=0)
    assert r.gpu_count == 0 and r.accelerator is None and r.to_k8s()["limits"] == {}


# --- quantities no machine has --------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "field", "rule"), [
    ({"cpu": 1e9}, "cpu", "more than any machine"),
    ({"cpu": "4097"}, "cpu", "more than any machine"),
    ({"cpu": (1, 10**6)}, "cpu", "more than any machine"),
    ({"memory": "1e30"}, "memory", "more than any machine"),
    ({"memory": 2**70}, "memory", "more than any machine"),
    ({"memory": "1e30Gi"}, "memory", "not a Kubernetes quantity"),
    ({"disk": "2Pi"}, "disk", "more than any machine"),
    ({"shm": "100Ti"}, "shm", "more than any machine"),
    ({"gpu": MAX_GPU + 1}, "gpu", "at most 64"),
    ({"gpu": "H100:1000"}, "gpu", "at most 64"),
    ({"cpu": 0}, "cpu", "limit of 0"),
    ({"memory": "0Gi"}, "memory", "limit of 0"),
    ({"disk": 0}, "disk", "limit of 0"),
    ({"shm": "0"}, "shm", "limit of 0"),
    ({"cpu": math.nan}, "cpu", "finite"),
    ({"cpu": -math.inf}, "cpu", "finite"),
    ({"cpu": -1}, "cpu", "negative"),
])
def test_a_quantity_no_machine_has_is_refused(kwargs: dict[str, Any], field: str,
                                              rule: str) -> None:
    with pytest.raises(SpecError) as err:
        shoal.Resources(**kwargs)
    assert err.value.field == field and rule in err.value.rule


def test_the_largest_quantities_and_a_zero_request_under_a_limit_are_accepted() -> None:
    r = shoal.Resources(cpu=(0, MAX_CPU), memory=(0, "64Ti"), gpu=MAX_GPU, disk="1Pi",
                        shm="64Ti")
    assert r.cpu_request == 0 and r.cpu_limit == MAX_CPU and r.memory_limit_bytes == MAX_MEMORY


@settings(max_examples=300, deadline=None, derandomize=True)
@given(cpu=st.one_of(st.integers(-10, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                     st.from_regex(r"[0-9]{1,14}(\.[0-9]{1,3})?(m|k|M|G|e[0-9]{1,2})?",
                                   fullmatch=True)),
       memory=st.one_of(st.integers(-10, 2**80),
                        st.from_regex(r"[0-9]{1,6}(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?",
                                      fullmatch=True)))
def test_any_accepted_quantity_lies_within_the_bounds(cpu: object, memory: object) -> None:
    try:
        r = shoal.Resources(cpu=cpu, memory=memory)  # type: ignore[arg-type]
    except SpecError:
        return
    assert r.cpu_limit is not None and 0 < r.cpu_limit <= MAX_CPU
    assert r.memory_limit_bytes is not None and 0 < r.memory_limit_bytes <= MAX_MEMORY
