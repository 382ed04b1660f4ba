"""`shoal run --containers` without a container: the podman argv by value, the limits, mounts
and env file it is made of, the OOM evidence of the kernel's log, and the refusals made
before anything runs. The real containers are tests/containers/test_local_containers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._driver import config
from shoal._engines.local.containers import ContainerPlan, container_name, passed_environ
from shoal._engines.local.containers.oom import kernel_logged_oom
from shoal._engines.local.containers.plan import Limits, env_file_text, limits_for, mounts_for
from shoal._engines.local.containers.runtime import Podman
from shoal.errors import SpecError


def test_a_worker_plan_renders_one_podman_argv() -> None:
    plan = ContainerPlan(
        name=container_name("r-1", "probe-w0"), image="shoal:0123456789abcdef",
        command=("python", "-m", "shoal._runtime.worker"), env_file="/tmp/s/containers/n/env",
        labels=(("shoal.run", "r-1"), ("shoal.driver", "42:1.5")),
        limits=Limits(cpus=1.5, memory=384 * 2**20, shm=96 * 2**20,
                      devices=("nvidia.com/gpu=1",)),
        mounts=tuple(mounts_for(home="/h", store="file:///st%5Fore", controller="/tmp/s/c.sock",
                                code_file="/code/pipe.py", secrets_dir="/tmp/s/secrets/probe",
                                mask_home_secrets=True)),
        init=True)
    assert " ".join(plan.argv()) == (
        "podman run --name shoal-r-1-probe-w0 --network host --log-driver passthrough "
        "--env-file /tmp/s/containers/n/env --security-opt label=disable "
        "--label shoal.run=r-1 --label shoal.driver=42:1.5 --init "
        "--cpus 1.5 --memory 402653184 --memory-swap 402653184 --shm-size 100663296 "
        "--pids-limit 4096 --device nvidia.com/gpu=1 "
        "--volume /h:/h --volume /tmp/s/c.sock:/tmp/s/c.sock --volume /st_ore:/st_ore "
        "--volume /code:/code:ro --volume /tmp/s/secrets/probe:/tmp/s/secrets/probe:ro "
        "--tmpfs /h/secrets:notmpcopyup,ro shoal:0123456789abcdef python -m shoal._runtime.worker")
    launcher = ContainerPlan(name="n", image="i", command=("python",), env_file="/e",
                             preserve_fds=2)
    assert "--preserve-fds 2" in " ".join(launcher.argv())
    assert "--init" not in launcher.argv()  # a launcher is PID 1 itself, as in a pod


def test_limits_are_the_resources_within_this_machine() -> None:
    def env(resources: shoal.Resources | None) -> object:
        return shoal.TaskEnvironment(name="e", resources=resources).spec()

    assert limits_for(env(None), cores=2, memory=2**30) == Limits()  # type: ignore[arg-type]
    both = limits_for(env(shoal.Resources(cpu=(1, 4), memory=("1Gi", "2Gi"), shm="auto")),
                      cores=2, memory=8 * 2**30)  # type: ignore[arg-type]
    assert (both.cpus, both.memory, both.shm) == (2.0, 2 * 2**30, 2 * 2**30)  # clamped cores
    one = limits_for(env(shoal.Resources(cpu=0.5)), cores=2,
                     memory=2**30)  # type: ignore[arg-type]
    assert (one.cpus, one.memory, one.shm) == (0.5, None, None)


def test_mounts_keep_one_per_path_read_write_winning() -> None:
    mounts = mounts_for(home="/w/home", store="s3://bucket/x", controller="/t/c.sock",
                        code_file="/w/home/pipe.py")
    assert [m.options() for m in mounts] == [("--volume", "/w/home:/w/home"),
                                            ("--volume", "/t/c.sock:/t/c.sock")]
    with pytest.raises(SpecError, match="':' or ','"):
        mounts_for(home="/a:b", store="s3://b", controller="/c", code_file="/d/e.py")


def test_the_env_file_refuses_a_line_break_and_names_the_variable() -> None:
    assert env_file_text({"B": "x=y #z", "A": " two "}) == "A= two \nB=x=y #z\n"
    with pytest.raises(SpecError) as e:
        env_file_text({"PEM": "-----BEGIN\nKEY-----"})
    assert "PEM" in str(e.value) and "Secret(" in str(e.value) and "BEGIN" not in str(e.value)


def test_only_the_contract_and_store_credentials_reach_a_container() -> None:
    assert passed_environ({"SHOAL_HOME": "/h", "AWS_REGION": "x", "PATH": "/bin",
                           "PYTHONPATH": "/src", "HF_TOKEN": "t"}) == {
        "SHOAL_HOME": "/h", "AWS_REGION": "x"}
    assert container_name("r.1", "a0.2", "0", "n1", "3") == "shoal-r.1-a0.2-0-n1-3"
    assert container_name("r", "w/ x") == "shoal-r-w-x"


def test_the_kernel_log_names_the_container_that_was_oom_killed(tmp_path: Path) -> None:
    cid = "66a9d0ac6f1156f148a2d009804070de0d786f26bd1266a872d25edd49357969"
    log = tmp_path / "kmsg"
    log.write_bytes(
        b"6,1,2,-;Memory cgroup stats for /shoal/x/libpod-" + cid.encode() + b":\n"
        b"6,2,3,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,"
        b"mems_allowed=0,oom_memcg=/libpod_parent/libpod-" + cid.encode()
        + b",task_memcg=/x,task=python,pid=1,uid=0\n")
    assert kernel_logged_oom(cid, kmsg=str(log))
    assert not kernel_logged_oom("f" * 64, kmsg=str(log))  # another container's kill
    assert not kernel_logged_oom(cid, kmsg=str(tmp_path / "unreadable"))
    assert not kernel_logged_oom("", kmsg=str(log))


def test_without_podman_the_flag_fails_at_once_saying_what_to_install(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SpecError) as e:
        Podman.find()
    assert "podman" in str(e.value) and "apt-get install podman" in str(e.value)


def test_containers_are_chosen_like_the_engine_and_refused_where_they_mean_nothing(
        tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="every task runs in its image already"):
        shoal.init(engine="kubernetes", containers=True)
    assert contract.CONTAINERS not in os.environ  # a refused init chooses nothing
    shoal.init(containers=True)
    assert contract.containers()
    shoal.init()  # None leaves the choice
    assert contract.containers()
    shoal.init(containers=False)
    assert not contract.containers()
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("containers: true\n")
    bad.write_text("containers: yes please\n")
    assert config.load(good).containers is True
    with pytest.raises(SpecError, match=r"containers.*must be true or false"):
        config.load(bad)
