"""The sbatch script of one attempt, as `SlurmEngine.job_plan` renders it from a real task of
a test program (tests/unit/slurm_program.py): #SBATCH lines from Resources and the settings'
placement, the node contract as exports that bash reads back unchanged, then the allocation
program. No Slurm runs here; bash does (the script's own shell)."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._engines.base import AttemptRef
from shoal._engines.slurm.config import SlurmSettings, settings_from_mapping
from shoal._engines.slurm.engine import SlurmEngine
from shoal._engines.slurm.script import pyxis_image
from shoal._runtime.loader import find_task
from shoal._spec.call import CallSpec
from shoal.errors import SpecError

PROGRAM = Path(__file__).with_name("slurm_program.py")
RUN = "r-20261201-1200-abcd"
STORE = "file:///shared/shoal/store"
# The nodes' interpreter, with a space: the exec line and SHOAL_NODE_COMMAND must quote it.
PYTHON = "/opt/shared venv/bin/python"
SETTINGS: dict[str, Any] = {
    "partition": "batch", "account": "ml-team", "python": PYTHON,
    "sbatch_options": ["--exclusive"],
    "priority_classes": {"high": {"partition": "gpu-high", "qos": "urgent"}},
}


def engine(tmp_path: Path, **changes: Any) -> SlurmEngine:
    settings = settings_from_mapping({**SETTINGS, **changes}, "slurm.yaml")
    return SlurmEngine(run=RUN, home=tmp_path / "home", store=STORE, settings=settings)


def call(task: str, **env_changes: Any) -> CallSpec:
    spec = find_task(PROGRAM, task).spec()
    if env_changes:
        spec = dataclasses.replace(spec, env=dataclasses.replace(spec.env, **env_changes))
    return CallSpec(task=spec, inputs={}, parent_action="a0")


def ref(tmp_path: Path, action: str = "a0.1", attempt: int = 0) -> AttemptRef:
    return AttemptRef(RUN, action, attempt,
                      tmp_path / "home" / "runs" / RUN / "logs" / f"{action}.{attempt}.log")


def script(tmp_path: Path, task: str, settings: dict[str, Any] | None = None,
           **env_changes: Any) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an image with no container runtime: its own test
        return engine(tmp_path, **(settings or {})).job_plan(call(task, **env_changes),
                                                             ref(tmp_path)).script


def sbatch_lines(text: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in text.splitlines()
            if line.startswith("#SBATCH ")]


def test_a_gang_asks_for_its_nodes_resources_placement_and_requeue(tmp_path: Path) -> None:
    text = script(tmp_path, "train")
    gang = tmp_path / "home" / "runs" / RUN / "logs" / "gang" / "a0.1.0"
    assert sbatch_lines(text) == [
        f"--job-name=shoal-{RUN}-a0.1-0", "--nodes=2", "--ntasks-per-node=1",
        "--cpus-per-task=6",  # the request: Slurm gives CPUs whole
        "--mem=32768M",  # the limit, in MiB: what a node may use before it is killed
        "--gpus-per-node=4",
        "--partition=gpu-high", "--account=ml-team", "--qos=urgent",  # the priority class's
        f"--output={gang}/batch.log", "--open-mode=append",
        "--requeue", "--signal=B:TERM@46",  # the grace period (45.5 s), rounded up
        "--exclusive"]
    assert text.startswith("#!/bin/bash\n")
    assert text.endswith(f"exec {shlex.quote(PYTHON)} -m shoal._runtime.node.allocation\n")


def test_a_plain_call_is_one_node_not_requeued_and_its_timeout_is_the_time_limit(
        tmp_path: Path) -> None:
    lines = sbatch_lines(script(tmp_path, "prepare"))
    assert lines[1:4] == ["--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=2"]  # 1.5 up
    assert "--mem=1536M" in lines and not any(o.startswith("--gpus") for o in lines)
    assert "--no-requeue" in lines and "--requeue" not in lines
    assert not any(o.startswith("--signal") for o in lines)
    assert "--time=11" in lines  # timeout=600 s: 10 minutes and a minute of slack
    assert "--partition=batch" in lines and not any(o.startswith("--qos") for o in lines)


@pytest.mark.parametrize(("settings", "time"), [
    ({"time_limit": "02:00:00"}, "02:00:00"),  # the settings' limit wins over the timeout
    ({"environments": {"slurm_prep": {"time_limit": "30"}}}, "30"),
])
def test_a_time_limit_in_the_settings_wins_over_the_timeout(
        tmp_path: Path, settings: dict[str, Any], time: str) -> None:
    lines = sbatch_lines(script(tmp_path, "prepare", settings))
    assert [o for o in lines if o.startswith("--time")] == [f"--time={time}"]


def test_a_gang_timeout_becomes_its_time_limit_and_none_sets_none(tmp_path: Path) -> None:
    assert "--time=121" in sbatch_lines(script(tmp_path, "train_briefly"))  # 7200 s
    assert not any(o.startswith("--time") for o in sbatch_lines(script(tmp_path, "train")))


def test_cpu_and_memory_are_rounded_up_and_no_resources_ask_for_one_cpu(
        tmp_path: Path) -> None:
    lines = sbatch_lines(script(tmp_path, "prepare",
                                resources=shoal.Resources(cpu=0.25, memory="1G")))
    assert "--cpus-per-task=1" in lines and "--mem=954M" in lines  # 10^9 bytes = 953.7 MiB
    lines = sbatch_lines(script(tmp_path, "prepare", resources=None))
    assert "--cpus-per-task=1" in lines  # Slurm's DefMemPerCPU gives the memory
    assert not any(o.startswith("--mem") for o in lines)


def exported(text: str, tmp_path: Path) -> dict[str, str]:
    """What bash holds after running the script's export lines, in an empty environment."""
    exports = tmp_path / "exports.sh"
    exports.write_text("\n".join(line for line in text.splitlines()
                                 if line.startswith("export ")) + "\n")
    done = subprocess.run(["/bin/bash", "-c", f"source {shlex.quote(str(exports))} && env -0"],
                          env={}, capture_output=True, check=True, timeout=30)
    pairs = (item.split("=", 1) for item in done.stdout.decode().split("\0") if item)
    return {k: v for k, v in pairs if k not in ("PWD", "SHLVL", "_", "OLDPWD")}


def test_exports_survive_bash_with_spaces_quotes_and_dollars(tmp_path: Path) -> None:
    text = script(tmp_path, "train")
    env = exported(text, tmp_path)
    assert env["GREETING"] == "it's a \"quoted\" value with  two spaces"
    assert env["DOLLAR"] == "$HOME and `date` stay as written" and env["EMPTY"] == ""
    gang = tmp_path / "home" / "runs" / RUN / "logs" / "gang" / "a0.1.0"
    assert {k: env[k] for k in (
        contract.RUN, contract.ACTION, contract.ATTEMPT, contract.STORE, contract.IO,
        contract.NNODES, contract.NPROC_PER_NODE, contract.GRACE_PERIOD, contract.TASK,
        contract.CODE_FILE, contract.GANG_LOG_DIR, contract.MAX_RESTARTS,
        contract.RESUME_AFTER_PREEMPTION, contract.NODE_COMMAND)} == {
        contract.RUN: RUN, contract.ACTION: "a0.1", contract.ATTEMPT: "0",
        contract.STORE: STORE, contract.IO: f"{STORE}/runs/{RUN}/a0.1/0",
        contract.NNODES: "2", contract.NPROC_PER_NODE: "4", contract.GRACE_PERIOD: "45.5",
        contract.TASK: "slurm_train.train", contract.CODE_FILE: str(PROGRAM),
        contract.GANG_LOG_DIR: str(gang), contract.MAX_RESTARTS: "2",
        contract.RESUME_AFTER_PREEMPTION: "1",
        contract.NODE_COMMAND: shlex.join([PYTHON, "-m", "shoal._runtime.node.launcher"])}
    assert shlex.split(env[contract.NODE_COMMAND])[0] == PYTHON
    assert env[contract.CHECKPOINT_URI].startswith(f"{STORE}/")
    # What differs per start is the allocation program's to set, never the script's.
    for per_start in (contract.NODE_RANK, contract.MASTER_ADDR, contract.MASTER_PORT,
                      contract.RESTART_ATTEMPT, contract.RANK_LOG_DIR):
        assert per_start not in env and f"{per_start}=" not in text
    assert contract.SRUN_OPTIONS not in env  # no container runtime configured
    assert contract.PREIMPORT not in env  # a gang forks its ranks: pre-importing pays off


def test_a_plain_call_uses_no_restarts_and_preimports_nothing(tmp_path: Path) -> None:
    env = exported(script(tmp_path, "prepare"), tmp_path)
    assert (env[contract.MAX_RESTARTS], env[contract.RESUME_AFTER_PREEMPTION]) == ("0", "0")
    assert (env[contract.NNODES], env[contract.NPROC_PER_NODE]) == ("1", "1")
    assert env[contract.PREIMPORT] == "0"


def test_the_whole_script_runs_under_bash_and_execs_the_allocation_with_its_variables(
        tmp_path: Path) -> None:
    """The nodes' "python" here is a stand-in that writes down its arguments and variables."""
    fake = tmp_path / "fake python"
    record = tmp_path / "record.json"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, "
                    f"open({str(record)!r}, 'w'))\n")
    fake.chmod(0o755)
    text = script(tmp_path, "train", {"python": str(fake)})
    subprocess.run(["/bin/bash", "-c", text], env={"PATH": "/usr/bin:/bin"}, check=True,
                   timeout=60)
    seen = json.loads(record.read_text())
    assert seen["argv"] == ["-m", "shoal._runtime.node.allocation"]
    assert seen["env"]["GREETING"] == "it's a \"quoted\" value with  two spaces"
    assert seen["env"][contract.NODE_COMMAND] == shlex.join(
        [str(fake), "-m", "shoal._runtime.node.launcher"])


def test_pyxis_puts_the_image_in_the_srun_options_only_when_configured(
        tmp_path: Path) -> None:
    settings = {"container_runtime": "pyxis",
                "container_options": ["--container-mounts=/data:/data"]}
    env = exported(script(tmp_path, "train", settings), tmp_path)
    assert shlex.split(env[contract.SRUN_OPTIONS]) == [  # enroot's registry#path form
        "--container-image=registry.example#train:1", "--container-mounts=/data:/data"]
    # The nodes' command is the same: pyxis runs it inside the image.
    assert env[contract.NODE_COMMAND].endswith("-m shoal._runtime.node.launcher")
    plain = exported(script(tmp_path, "prepare", settings), tmp_path)  # no image: none
    assert contract.SRUN_OPTIONS not in plain


def test_a_built_image_is_named_with_the_registry(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(contract.IMAGE_REGISTRY, "quay.io/team")
    image = shoal.Image.from_debian_base(python_version="3.11").with_pip_packages("six")
    env = exported(script(tmp_path, "train", {"container_runtime": "pyxis"}, image=image),
                   tmp_path)
    assert image.uri().startswith("quay.io/team/")
    assert env[contract.SRUN_OPTIONS] == shlex.quote(
        "--container-image=quay.io#" + image.uri().removeprefix("quay.io/"))


@pytest.mark.parametrize(("ref", "pyxis"), [
    ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
    ("localhost:5000/train:1", "localhost:5000#train:1"),
    ("localhost/train", "localhost#train"),
    ("ghcr.io/org/team/img@sha256:abc", "ghcr.io#org/team/img@sha256:abc"),
    ("nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),  # as written
    ("ubuntu:22.04", "ubuntu:22.04"), ("pytorch/pytorch:2.4", "pytorch/pytorch:2.4"),
    ("/shared/images/train.sqsh", "/shared/images/train.sqsh"),
    ("./train.sqsh", "./train.sqsh"),
])
def test_image_references_in_pyxis_form(ref: str, pyxis: str) -> None:
    assert pyxis_image(ref) == pyxis


def test_images_without_a_container_runtime_are_warned_about_once(tmp_path: Path) -> None:
    e = engine(tmp_path)
    envs = [call("train").task.env, call("prepare").task.env]
    said_first = r"environment\(s\) 'slurm_train': their images are not used on Slurm"
    with pytest.warns(UserWarning, match=said_first) as said:
        e.warn_unused_images(envs)
    assert len(said) == 1  # one line for all of them; slurm_prep has no image
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e.warn_unused_images(envs)  # said once per environment
        e.job_plan(call("train"), ref(tmp_path, attempt=1))


@pytest.mark.parametrize("option", ["--partition=other", "-N 3", "--mem=1G"])
def test_settings_built_in_code_still_cannot_set_shoals_own_options(
        tmp_path: Path, option: str) -> None:
    e = SlurmEngine(run=RUN, home=tmp_path, store=STORE,
                    settings=SlurmSettings(sbatch_options=(option,), python=PYTHON))
    with pytest.raises(SpecError) as err:
        e.job_plan(call("prepare"), ref(tmp_path))
    assert err.value.field == "Slurm settings: sbatch_options" and err.value.value == option


def test_a_priority_class_the_settings_do_not_map_is_refused(tmp_path: Path) -> None:
    e = SlurmEngine(run=RUN, home=tmp_path, store=STORE, settings=SlurmSettings())
    with pytest.raises(SpecError) as err:
        e.job_plan(call("train"), ref(tmp_path))
    assert err.value.value == "high" and "slurm_train" in err.value.field


def test_progress_timeout_is_refused_on_slurm(tmp_path: Path) -> None:
    cluster = find_task(PROGRAM, "train").spec().env.cluster
    with pytest.raises(SpecError) as err:
        script(tmp_path, "train", cluster=dataclasses.replace(cluster, progress_timeout=60.0))
    assert "progress_timeout" in err.value.field and "collective_timeout" in str(err.value.fix)


def test_the_dry_run_has_one_script_per_environment_the_driver_calls(tmp_path: Path) -> None:
    root = dataclasses.replace(call("main"), parent_action=None)
    envs = [find_task(PROGRAM, t).spec().env for t in ("prepare", "train", "main")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripts = engine(tmp_path).scripts(root, envs)
    assert sorted(scripts) == ["slurm_prep.sbatch", "slurm_train.sbatch"]  # not the driver's
    assert "--nodes=2" in sbatch_lines(scripts["slurm_train.sbatch"])
    assert "--no-requeue" in sbatch_lines(scripts["slurm_prep.sbatch"])


@pytest.mark.parametrize(("said", "key", "value"), [
    ("Batch job submission failed: Invalid account or account/partition combination "
     "specified", "account", "ml-team"),
    ("Batch job submission failed: Invalid qos specification", "qos", "urgent"),
])
def test_a_refused_account_or_qos_is_named_not_the_partition(
        tmp_path: Path, said: str, key: str, value: str) -> None:
    """Slurm's words for a bad account name the partition too (sbatch --test-only's answer)."""
    err = engine(tmp_path)._refused(call("train").task.env, said)
    assert (err.field, err.value) == (f"Slurm settings: {key} (environment 'slurm_train')",
                                      value)
    assert said in err.rule and "environments.slurm_train" in str(err.fix)


def test_a_refused_size_names_what_the_environment_asks_for(tmp_path: Path) -> None:
    err = engine(tmp_path)._refused(call("train").task.env, "Batch job submission failed: "
                                    "Requested node configuration is not available")
    assert err.field == "environment 'slurm_train'"
    assert err.value == "2 node(s), --cpus-per-task=6 --mem=32768M --gpus-per-node=4"
    assert "Resources(cpu=" in str(err.fix)


def test_a_home_with_a_space_gives_a_quoted_output_directive(tmp_path: Path) -> None:
    """sbatch 22.05 refuses `#SBATCH --output=/a b/x.log` ("Invalid directive found in batch
    script: b/x.log") and reads '/a b/x.log' quoted, as tried on the test cluster."""
    home = tmp_path / "my home"
    e = SlurmEngine(run=RUN, home=home, store=STORE,
                    settings=settings_from_mapping(SETTINGS, "slurm.yaml"))
    ref = AttemptRef(RUN, "a0.1", 0, home / "runs" / RUN / "logs" / "a0.1.0.log")
    line = next(o for o in sbatch_lines(e.job_plan(call("prepare"), ref).script)
                if o.startswith("--output="))
    assert shlex.split(line) == [f"--output={home}/runs/{RUN}/logs/gang/a0.1.0/batch.log"]
    assert line != shlex.split(line)[0]  # quoted


def test_a_gpu_type_is_asked_for_where_the_settings_name_it_and_disk_is_not(
        tmp_path: Path) -> None:
    typed = sbatch_lines(script(tmp_path, "train", {"gpu_types": {"H200": "h200"}}))
    assert "--gpus-per-node=h200:4" in typed
    other = sbatch_lines(script(tmp_path, "train", {"gpu_types": {"A100": "a100"}}))
    assert "--gpus-per-node=4" in other  # an accelerator the settings do not name: by count
    disk = sbatch_lines(script(tmp_path, "prepare",
                               resources=shoal.Resources(cpu=1, memory="1Gi", disk="10Gi")))
    assert not any(o.startswith("--tmp") for o in disk)  # TmpDisk is often undeclared


def test_a_ray_cluster_asks_every_node_for_the_most_any_group_needs(tmp_path: Path) -> None:
    text = script(tmp_path, "ray_count", {"gpu_types": {"H200": "h200"}})
    lines = sbatch_lines(text)
    assert lines[1:3] == ["--nodes=4", "--ntasks-per-node=1"]  # the head and 1 + 2 workers
    # The head's 2 CPUs and 2 GiB (the environment's), "big"'s 6 CPUs and 3 GiB, "gpus"' GPU.
    assert lines[3:6] == ["--cpus-per-task=6", "--mem=3072M", "--gpus-per-node=h200:1"]
    values = exported(text, tmp_path)
    assert values[contract.RUNTIME] == "ray"
    nodes = json.loads(values[contract.RAY_NODES])  # bash reads the JSON back unchanged
    assert [(n["group"], n["num_cpus"], n["num_gpus"]) for n in nodes] == [
        ("head", 2, 0), ("big", 6, 0), ("gpus", 1, 1), ("gpus", 1, 1)]
    assert nodes[0]["start_params"] == [["log-color", "false"]]
    assert contract.MASTER_PORT not in values  # chosen per start, by the allocation program
