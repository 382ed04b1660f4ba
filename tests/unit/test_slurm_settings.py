"""The Slurm engine's settings file: every bad value names the field, the value, the rule and
a fix; placements layer settings < priority class < environment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from shoal._engines.slurm.config import (
    Placement,
    SlurmSettings,
    load_settings,
    settings_from_mapping,
)
from shoal.errors import SpecError

WHERE = "slurm.yaml"


def refused(data: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as err:
        settings_from_mapping(data, WHERE)
    e = err.value
    assert e.rule and e.fix, e  # every refusal says what holds and what to do
    return e


@pytest.mark.parametrize(("data", "field", "value", "rule_words", "fix_words"), [
    ({"partiton": "gpu"}, "slurm.yaml: partiton", "gpu", "not a Slurm setting", "spelling"),
    ({"time_limit": "2 days"}, "slurm.yaml: time_limit", "2 days", "Slurm time",
     "time_limit:"),
    ({"time_limit": "1-2-3"}, "slurm.yaml: time_limit", "1-2-3", "D-HH:MM:SS", "time_limit:"),
    ({"partition": "gpu nodes"}, "slurm.yaml: partition", "gpu nodes", "name Slurm accepts",
     "partition:"),
    ({"account": ""}, "slurm.yaml: account", "", "name Slurm accepts", "account:"),
    ({"qos": 3}, "slurm.yaml: qos", 3, "name Slurm accepts", "qos:"),
    ({"sbatch_options": "--exclusive"}, "slurm.yaml: sbatch_options", "--exclusive",
     "list of sbatch options", "sbatch_options: ["),
    ({"sbatch_options": ["exclusive"]}, "slurm.yaml: sbatch_options", ["exclusive"],
     "starting with '-'", "--exclusive"),
    ({"container_options": ["mounts=/a:/a"]}, "slurm.yaml: container_options",
     ["mounts=/a:/a"], "starting with '-'", "container_options"),
    ({"container_runtime": "docker"}, "slurm.yaml: container_runtime", "docker",
     "known: pyxis", "pyxis"),
    ({"poll_seconds": 0.01}, "slurm.yaml: poll_seconds", 0.01, "0.05 to 60",
     "poll_seconds: 1"),
    ({"poll_seconds": 61}, "slurm.yaml: poll_seconds", 61, "0.05 to 60", "poll_seconds"),
    ({"poll_seconds": True}, "slurm.yaml: poll_seconds", True, "number of seconds",
     "poll_seconds"),
    ({"poll_seconds": "1"}, "slurm.yaml: poll_seconds", "1", "number of seconds",
     "poll_seconds"),
    ({"python": ""}, "slurm.yaml: python", "", "non-empty string", "python:"),
    ({"store": 5}, "slurm.yaml: store", 5, "non-empty string", "store:"),
    ({"environments": ["data"]}, "slurm.yaml: environments", ["data"],
     "map names to placements", "environments:"),
    ({"environments": {"data": "cpu"}}, "slurm.yaml: environments.data", "cpu",
     "must be a mapping", "partition"),
    ({"environments": {"data": {"nodes": 2}}}, "slurm.yaml: environments.data.nodes", 2,
     "not a setting here", "spelling"),
    ({"environments": {"data": {"time_limit": "soon"}}},
     "slurm.yaml: environments.data.time_limit", "soon", "Slurm time", "time_limit"),
    ({"priority_classes": {"high": {"qos": "a b"}}}, "slurm.yaml: priority_classes.high.qos",
     "a b", "name Slurm accepts", "qos"),
    ({"gpu_types": {"H200": "h200 sxm"}}, "slurm.yaml: gpu_types", {"H200": "h200 sxm"},
     "GPU types of the cluster's gres.conf", "gpu_types: {H200: h200"),
    ({"gpu_types": ["h200"]}, "slurm.yaml: gpu_types", ["h200"], "must map accelerator",
     "gpu_types:"),
    ({"priority_classes": {"high": {"sbatch_options": [1]}}},
     "slurm.yaml: priority_classes.high.sbatch_options", [1], "starting with '-'",
     "sbatch_options"),
])
def test_every_bad_value_names_field_value_rule_and_fix(
        data: dict[str, Any], field: str, value: object, rule_words: str,
        fix_words: str) -> None:
    e = refused(data)
    assert (e.field, e.value) == (field, value)
    assert rule_words in e.rule and fix_words in str(e.fix)
    assert str(value) in str(e)  # the message a user reads quotes what they wrote


def test_an_unknown_key_lists_the_known_ones() -> None:
    e = refused({"partition": "gpu", "acount": "ml"})
    assert e.field == "slurm.yaml: acount" and "account" in e.rule and "time_limit" in e.rule


@pytest.mark.parametrize("time", ["90", "30:00", "12:00:00", "2-00", "2-12:30", "1-00:00:00",
                                  "infinite", "UNLIMITED", 90])
def test_every_slurm_time_format_is_accepted(time: object) -> None:
    assert settings_from_mapping({"time_limit": time}, WHERE).time_limit == str(time)


def test_good_values_are_kept() -> None:
    s = settings_from_mapping({
        "partition": "gpu", "account": "ml-team", "qos": "normal", "time_limit": "01:00:00",
        "sbatch_options": ["--exclusive", "-C a100"], "container_runtime": "pyxis",
        "container_options": ["--container-mounts=/data:/data"], "python": "/venv/bin/python",
        "store": "file:///shared/store", "poll_seconds": 2}, WHERE)
    assert s.placement == Placement("gpu", "ml-team", "normal", "01:00:00",
                                    ("--exclusive", "-C a100"))
    assert (s.container_runtime, s.container_options) == (
        "pyxis", ("--container-mounts=/data:/data",))
    assert (s.python, s.store, s.poll_seconds) == ("/venv/bin/python", "file:///shared/store",
                                                   2.0)


@pytest.mark.parametrize(("option", "own"), [
    ("--partition=gpu", "--partition"), ("-p gpu", "-p"), ("-pgpu", "-p"),
    ("--part=gpu", "--partition"), ("--time 10", "--time"), ("-t10", "-t"),
    ("--nodes=2", "--nodes"), ("-N 2", "-N"), ("--ntasks=8", "--ntasks"),
    ("--mem=4G", "--mem"), ("--requeue", "--requeue"), ("--signal=B:USR1@60", "--signal"),
    ("--output=/tmp/x", "--output"), ("-J name", "-J"), ("--qos=high", "--qos"),
    ("--gpus=2", "--gpus-per-node"),
])
def test_sbatch_options_that_shoal_sets_are_refused_when_loaded(option: str, own: str) -> None:
    e = refused({"environments": {"data": {"sbatch_options": ["--exclusive", option]}}})
    assert (e.field, e.value) == ("slurm.yaml: environments.data.sbatch_options", option)
    assert f"sets {own}," in e.rule and "partition:" in str(e.fix)


@pytest.mark.parametrize("option", ["--exclusive", "--constraint=a100", "-C a100",
                                    "--mem-per-cpu=2G", "--time-min=10", "--nodelist=n1",
                                    "--gres=gpu:2", "--reservation=r", "--export=ALL"])
def test_other_sbatch_options_pass(option: str) -> None:
    s = settings_from_mapping({"sbatch_options": [option]}, WHERE)
    assert s.sbatch_options == (option,)


def layered() -> SlurmSettings:
    return settings_from_mapping({
        "partition": "batch", "account": "ml", "time_limit": "1-00:00:00",
        "sbatch_options": ["--exclusive"],
        "environments": {"data": {"partition": "cpu", "time_limit": "01:00:00",
                                  "sbatch_options": ["--constraint=ssd"]},
                         "pretrain": {"qos": "long"}},
        "priority_classes": {"high": {"qos": "urgent", "partition": "gpu-high"},
                             "low": {"partition": "scavenger"}}}, WHERE)


def test_placement_layers_settings_then_priority_class_then_environment() -> None:
    s = layered()
    assert s.placement_for("other", None) == Placement("batch", "ml", None, "1-00:00:00",
                                                       ("--exclusive",))
    # The environment's own values win; options add up; the rest comes from the settings.
    assert s.placement_for("data", None) == Placement(
        "cpu", "ml", None, "01:00:00", ("--exclusive", "--constraint=ssd"))
    assert s.placement_for("other", "high") == Placement("gpu-high", "ml", "urgent",
                                                         "1-00:00:00", ("--exclusive",))
    # The environment is over the priority class: its qos wins, the class's partition stays.
    assert s.placement_for("pretrain", "high") == Placement("gpu-high", "ml", "long",
                                                            "1-00:00:00", ("--exclusive",))
    assert s.placement_for("data", "low").partition == "cpu"
    assert s.placement_for("pretrain", "low").partition == "scavenger"


def test_an_unknown_priority_class_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SpecError) as err:
        layered().placement_for("pretrain", "urgent")
    e = err.value
    assert e.value == "urgent" and "pretrain" in e.field and "priority-class" in e.field
    assert "known: high, low" in e.rule and "priority_classes: {urgent:" in str(e.fix)
    with pytest.raises(SpecError, match="known: none"):
        SlurmSettings().placement_for("pretrain", "urgent")


def test_no_file_and_an_empty_file_are_the_clusters_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "slurm.yaml"
    empty.write_text("# nothing set yet\n")
    for path in (None, str(empty)):
        s = load_settings(path, "--slurm-settings", "file:///from/run")
        assert s.placement == Placement() and s.environments == {}
        assert s.container_runtime is None and s.poll_seconds == 1.0
        assert s.store == "file:///from/run"  # the run's store, where the file names none


def test_the_files_store_wins_over_the_runs(tmp_path: Path) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text("store: file:///shared/store\npartition: gpu\n")
    s = load_settings(str(path), "--slurm-settings", "file:///from/run")
    assert (s.store, s.partition) == ("file:///shared/store", "gpu")


def test_a_json_file_is_read_as_json(tmp_path: Path) -> None:
    path = tmp_path / "slurm.json"
    path.write_text('{"partition": "gpu", "environments": {"data": {"qos": "cheap"}}}')
    s = load_settings(str(path), "--slurm-settings", "")
    assert s.placement_for("data", None) == Placement("gpu", None, "cheap")


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text("- partition: gpu\n")
    with pytest.raises(SpecError) as err:
        load_settings(str(path), "--slurm-settings", "")
    e = err.value
    assert (e.field, e.value) == ("--slurm-settings", str(path))
    assert "mapping of Slurm settings" in e.rule and "partition: gpu" in str(e.fix)


def test_a_bad_value_in_a_file_names_where_the_path_came_from(tmp_path: Path) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text("environments:\n  data: {partition: 'a b'}\n")
    with pytest.raises(SpecError) as err:
        load_settings(str(path), "SHOAL_SLURM_SETTINGS", "")
    assert err.value.field == "SHOAL_SLURM_SETTINGS: environments.data.partition"


def test_a_missing_or_unreadable_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as err:
        load_settings(str(missing), "--slurm-settings", "")
    assert err.value.value == str(missing) and "cannot be read" in err.value.rule
    assert "YAML file of Slurm settings" in str(err.value.fix)
    with pytest.raises(SpecError, match="cannot be read"):
        load_settings(str(tmp_path), "--slurm-settings", "")  # a folder
    if os.geteuid() != 0:  # root reads any file
        locked = tmp_path / "locked.yaml"
        locked.write_text("partition: gpu\n")
        locked.chmod(0)
        with pytest.raises(SpecError, match="Permission denied"):
            load_settings(str(locked), "--slurm-settings", "")


def test_settings_travel_as_json() -> None:
    import json

    data = json.loads(layered().to_json())
    assert data["partition"] == "batch" and data["sbatch_options"] == ["--exclusive"]
    assert data["environments"]["data"] == {
        "partition": "cpu", "account": None, "qos": None, "time_limit": "01:00:00",
        "sbatch_options": ["--constraint=ssd"]}
    assert data["priority_classes"]["high"]["qos"] == "urgent"


@pytest.mark.parametrize(("written", "read"), [
    ("12:00:00", "12:00:00"), ("30:00", "30:00"), ("1-12:00", "1-12:00"), ("90", "90")])
def test_an_unquoted_time_in_yaml_is_the_time_written(tmp_path: Path, written: str,
                                                      read: str) -> None:
    """YAML 1.1 reads 12:00:00 as the base-60 number 43200, which sbatch would take for
    minutes (30 days); the settings keep what was written."""
    path = tmp_path / "slurm.yaml"
    path.write_text(f"time_limit: {written}\nenvironments:\n  data: {{time_limit: {written}}}\n"
                    "poll_seconds: 0.5\n")
    s = load_settings(str(path), "--slurm-settings", "")
    assert s.time_limit == read and s.environments["data"].time_limit == read
    assert s.poll_seconds == 0.5  # other numbers are still numbers


def test_a_yaml_flow_mapping_is_yaml_not_broken_json(tmp_path: Path) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text("{partition: gpu, time_limit: 30:00}\n")
    s = load_settings(str(path), "--slurm-settings", "")
    assert (s.partition, s.time_limit) == ("gpu", "30:00")


def test_a_file_that_is_not_yaml_is_refused_with_where(tmp_path: Path) -> None:
    path = tmp_path / "slurm.yaml"
    path.write_text("partition: [gpu\n")
    with pytest.raises(SpecError) as err:
        load_settings(str(path), "--slurm-settings", "")
    e = err.value
    assert (e.field, e.value) == ("--slurm-settings", str(path))
    assert e.rule.startswith("is not valid YAML: ") and "line 2" in e.rule
    assert "\n" not in e.rule and e.fix == "fix the file's syntax"
