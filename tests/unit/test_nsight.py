"""`shoal.plugins.nsight`: Flyte's ``nsys_profile`` compiled to a Shoal profile, its bad input
refused when written, the regions' and NVTX labels' rules, and an nsys session's start and
stop. The real runs (a stand-in ``nsys``, workers and a gang) are in
tests/port/test_flyte_port.py; the refusals a real ``nsys`` gives on a pod without the
capabilities it needs are played here by a four-line script, said where it is written."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._driver.run_options import RunOptions
from shoal._driver.runner import Runner
from shoal._runtime.observe import nsys_session
from shoal._runtime.observe.profiling import RankProfiler, check_profiles
from shoal._spec.call import EnvSpec
from shoal._spec.profile import ProfileSpec, parse_profile, profile_from_text
from shoal.clustered import ClusteredTaskEnvironment
from shoal.errors import SpecError
from shoal.plugins import nsight
from shoal.plugins.nsight import DEFAULT_REPORTS, nsys, nsys_profile, nvtx

plain = shoal.TaskEnvironment(name="nsight_plain", env_vars={"KEEP": "1"})
gang = ClusteredTaskEnvironment(name="nsight_gang", replicas=2, nproc_per_node=2)


@plain.task
def body(x: int) -> int:
    return x


@gang.task
def ranks_body(x: int) -> int:
    return x


on_pods = shoal.TaskEnvironment(name="nsight_pods",
                                pod_template=shoal.PodTemplate().allow_nested_sandboxing())


@nsys_profile(capture="manual")
@on_pods.task
def pod_body() -> None:
    pass


def test_the_public_names_are_flytes() -> None:
    assert sorted(nsight.__all__) == ["DEFAULT_REPORTS", "capture_report_file", "nsys",
                                      "nsys_available", "nsys_profile", "nvtx", "session_name",
                                      "under_nsys"]
    assert nsys.profile is nsys.range


def test_the_decorator_is_the_task_with_a_profile_its_calls_carry() -> None:
    profiled = nsys_profile(body)  # bare, as Flyte allows
    assert profiled.spec().env.profile == ProfileSpec(
        ranks=(0,), steps=None, tool="nsys", capture="task", trace=("cuda", "nvtx"),
        stats=DEFAULT_REPORTS)
    assert dict(profiled.spec().env.env_vars) == {"KEEP": "1"}  # the environment's stay
    assert body.spec().env.profile is None  # the undecorated task is untouched
    manual = nsys_profile(capture="manual", trace=["cuda", "osrt"], sample="none",
                          reports=[], attach_report=False, ranks="all")(ranks_body)
    spec = manual.spec().env.profile
    assert spec is not None and spec.window == "regions" and spec.ranks is None
    assert spec.to_text() == "ranks=all:capture=manual:tool=nsys:trace=cuda,osrt:sample=none" \
                             ":report=0"
    assert profile_from_text(spec.to_text(), contract.PROFILE) == spec
    assert nsys_profile(enabled=False)(body) is body
    # `shoal run --profile ENV:...` replaces it for a run, as it replaces an environment's own.
    call = manual.make_call((1,), {}, parent_action=None)
    other = ProfileSpec(ranks=(1,))
    assert RunOptions(profiles={"nsight_gang": other}).apply(call).task.env.profile == other


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"trace": "cuda,nvtx"}, "nsys_profile(trace=)", "trace=['cuda', 'nvtx']"),
    ({"trace": ["cuda", "nvtxx"]}, "nsys_profile(trace=)", "did you mean 'nvtx'"),
    ({"trace": []}, "nsys_profile(trace=)", "at least one"),
    ({"trace": ["none", "cuda"]}, "nsys_profile(trace=)", "stands alone"),
    ({"trace": ["cuda", "cuda"]}, "nsys_profile(trace=)", "twice"),
    ({"capture": "everything"}, "nsys_profile(capture=)", "'task'"),
    ({"capture": "manaul"}, "nsys_profile(capture=)", "did you mean 'manual'"),
    ({"sample": "cpu"}, "nsys_profile(sample=)", "process-tree"),
    ({"sample": "always"}, "nsys_profile(sample=)", "system-wide"),
    ({"reports": "cuda_api_sum"}, "nsys_profile(reports=)", "reports=['cuda_api_sum']"),
    ({"reports": ["CUDA API"]}, "nsys_profile(reports=)", "nsys stats --help-reports"),
    ({"ranks": []}, "nsys_profile(ranks=)", "non-empty"),
    ({"ranks": [0, 0]}, "nsys_profile(ranks=)", "twice"),
    ({"attach_report": "yes"}, "nsys_profile(attach_report=)", "bool"),
    ({"enabled": 0}, "nsys_profile(enabled=)", "bool"),
])
def test_bad_input_is_refused_where_it_is_written(kwargs: dict[str, Any], field: str,
                                                  words: str) -> None:
    with pytest.raises(SpecError) as e:
        nsys_profile(**kwargs)
    assert e.value.field == field and words in str(e.value) and e.value.fix, str(e.value)


def test_what_it_decorates_and_which_ranks_are_checked_against_the_task() -> None:
    with pytest.raises(SpecError, match=r"above @env\.task") as e:
        nsys_profile(lambda: None)  # type: ignore[type-var]
    assert e.value.field == "@nsys_profile"
    with pytest.raises(SpecError, match=r"world size \(4\)") as e:
        nsys_profile(ranks=[1, 4])(ranks_body)
    assert e.value.field == "nsys_profile(ranks=)" and "between 0 and 3" in e.value.fix
    with pytest.raises(SpecError, match="plain task") as e:
        nsys_profile(ranks=[1])(body)
    assert nsys_profile(ranks=[3])(ranks_body).spec().env.profile.ranks == (3,)  # type: ignore[union-attr]


def test_a_profile_takes_a_capture_window_and_nsys_options_only_for_nsys() -> None:
    env, p = parse_profile("train:ranks=0:capture=manual:tool=nsys:trace=cuda,nvtx:stats="
                           "nvtx_sum,osrt_sum:report=0")
    assert env == "train" and p == shoal.Profile(
        ranks=[0], capture="manual", tool="nsys", trace=["cuda", "nvtx"],
        stats=["nvtx_sum", "osrt_sum"], keep_report=False)
    with pytest.raises(SpecError, match="Nsight Systems only") as e:
        shoal.Profile(trace=["cuda"])
    assert e.value.field == "Profile.trace" and 'tool="nsys"' in e.value.fix
    with pytest.raises(SpecError, match="one window"):
        shoal.Profile(tool="nsys", capture="task", steps=(1, 2))
    with pytest.raises(SpecError, match="one window"):
        parse_profile("train:capture=task:seconds=1-2")
    with pytest.raises(SpecError, match="0 or 1"):
        parse_profile("train:tool=nsys:report=no")


def test_a_capture_profile_may_wrap_a_plain_task_and_needs_nsys_to_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    capture = ProfileSpec(tool="nsys", steps=None, capture="task")
    check_profiles([EnvSpec(name="p", profile=capture)], local=False)
    with pytest.raises(SpecError, match="capture its whole body"):
        check_profiles([EnvSpec(name="p", profile=ProfileSpec(tool="nsys"))], local=False)
    # The root call's own profile is checked before a run is recorded: no nsys, no run.
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    call = nsys_profile(body).make_call((1,), {}, parent_action=None)
    with pytest.raises(SpecError, match=r"nsys.*on PATH") as e:
        Runner(call, envs=[plain.spec()])
    assert e.value.field == "profile of task 'nsight_plain.body': tool"
    assert "nsys_profile(enabled=False)" in e.value.fix and "apt-get install" in e.value.fix


def test_regions_never_nest_profiled_or_not_and_their_names_are_checked() -> None:
    with (nsys.range("outer"), pytest.raises(SpecError, match="inside region 'outer'") as e,
          nsys.range("inner")):
        pass
    assert "nvtx.range('inner')" in (e.value.fix or "")
    with nsys.range("again"):  # the refused one left nothing open
        pass

    async def body() -> None:
        async with nsys.profile("async-region"):
            with pytest.raises(SpecError):
                async with nsys.range("nested"):
                    pass

    asyncio.run(body())
    for bad in ("", "hot loop", "../up"):
        with pytest.raises(SpecError, match="a region name") as e:
            nsys.range(bad)
        assert e.value.field == "nsys.range(name)"
    with pytest.raises(SpecError, match=r"nsys\.range\(reports=\)"):
        nsys.range("r", reports="cuda_api_sum")  # type: ignore[arg-type]


def test_nvtx_labels_do_nothing_on_cpu_torch_and_are_spans_of_shoals_torch_profiler(
        tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    assert not hasattr(torch._C, "_nvtx")  # a CPU build: torch.cuda.nvtx would raise here
    with nvtx.range("unprofiled"):
        nvtx.mark("unprofiled-mark")
    spec = ProfileSpec(steps=(0, 5))
    with RankProfiler(spec, tmp_path, rank=0):
        with nvtx.range("forward"):
            torch.ones(8).sum()
        nvtx.mark("checkpoint")
    names = {e.get("name") for e in json.loads((tmp_path / "rank0.json").read_text())
             ["traceEvents"]}
    assert {"forward", "checkpoint"} <= names and "unprofiled" not in names
    with pytest.raises(SpecError, match=r"nvtx\.range\(message\)"), nvtx.range(""):
        pass


def test_a_session_collects_each_region_and_survives_a_refused_start(
        tmp_path: Path, stand_in_nsys: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(nsys_session, "ARM_SECONDS", 0.0)  # real nsys's settling time
    state = stand_in_nsys.parent / "nsys-state"
    (state / "s-1").touch()  # what `nsys launch --session-new=s-1` leaves in the stand-in
    monkeypatch.setenv(contract.NSYS_SESSION, "s-1")
    kept: list[list[str]] = []
    spec = ProfileSpec(tool="nsys", steps=None, capture="manual", stats=("nvtx_sum",))
    folder = tmp_path / "regions"
    with nsys_session.capture_scope(spec, folder=folder, rank=2,
                                    keep=lambda paths: kept.append([p.name for p in paths])):
        for _ in range(2):
            with nsys.range("step"):
                pass
        with nsys.range("eval", attach=False):
            pass
    assert kept == [["rank2.step.nsys-rep", "rank2.step.nsys-stats.txt"],
                    ["rank2.step-2.nsys-rep", "rank2.step-2.nsys-stats.txt"],
                    ["rank2.eval.nsys-stats.txt"]]
    assert not (folder / "rank2.eval.nsys-rep").exists()  # attach=False: the stats alone
    assert not nsys_session.collecting()
    # nsys refusing to start (no capabilities on the pod) leaves the body running, and says
    # what to grant: a script in nsys's place that prints nsys's refusal.
    refusing = tmp_path / "refusing"
    refusing.mkdir()
    (refusing / "nsys").write_text("#!/bin/sh\necho 'ERR_NVGPUCTRPERM: insufficient "
                                   "privileges' >&2\nexit 1\n")
    (refusing / "nsys").chmod(0o755)
    monkeypatch.setenv("PATH", str(refusing))
    monkeypatch.setattr(nsys_session, "START_TRIES", 1)
    ran = []
    with nsys_session.capture_scope(ProfileSpec(tool="nsys", steps=None, capture="task"),
                                    folder=tmp_path / "task", rank=0, keep=kept.append):
        ran.append(True)
    assert ran == [True] and len(kept) == 3
    err = capsys.readouterr().err
    assert "runs unprofiled" in err and "allow_nested_sandboxing()" in err


def test_the_launch_command_carries_the_trace_and_sample() -> None:
    spec = ProfileSpec(tool="nsys", steps=None, capture="task", trace=("cuda", "nvtx"),
                       sample="none")
    argv = nsys_session.launch_argv("/bin/nsys", spec, "s", ("py", "-m", "w"))
    assert argv == ["/bin/nsys", "launch", "--session-new=s", "--trace=cuda,nvtx",
                    "--sample=none", "py", "-m", "w"]
    assert not nsys_session.wants_session(ProfileSpec(tool="nsys"), 0)  # a steps window
    assert nsys_session.wants_session(spec, 0) and not nsys_session.wants_session(
        ProfileSpec(ranks=(1,), tool="nsys", steps=None, capture="task"), 0)


def test_flytes_pod_template_and_image_helpers_of_the_examples() -> None:
    pt = shoal.PodTemplate(annotations={"team": "a"}).allow_nested_sandboxing()
    assert pt.pod_spec == {"containers": [{"name": "primary", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"add": ["SYS_ADMIN"]}}}]}
    assert pt.annotations == {"team": "a", "container.apparmor.security.beta.kubernetes.io/"
                                           "primary": "unconfined"}
    assert pt.allow_nested_sandboxing() == pt  # twice is once
    privileged = shoal.PodTemplate(pod_spec={"containers": [
        {"name": "primary", "securityContext": {"privileged": True}}]})
    with pytest.raises(SpecError, match="privileged"):
        privileged.allow_nested_sandboxing()
    image = shoal.Image.from_debian_base()
    assert image.with_local_v2_plugins(["flyteplugins-nsight"]).install_shoal
    assert image.with_local_v2_plugins() == image
    with pytest.raises(SpecError, match="flyteplugins-<name>"):
        image.with_local_v2_plugins("nsight")


def test_on_kubernetes_the_pod_reads_the_capture_and_gets_the_capabilities_nsys_needs() -> None:
    from shoal._contract import NodeEnv
    from shoal._engines.kubernetes import CodeBundle, KubeConfig, compile_call
    from shoal._runtime.node.rank_start import nsys_profiled
    from shoal._spec.call import CallSpec

    [job] = compile_call(CallSpec(task=pod_body.spec(), inputs={}), run="r-1", action="a0",
                         attempt=0, config=KubeConfig(store="s3://b/s", namespace="ml",
                                                      default_image="shoal:1"),
                         code=CodeBundle(uri="s3://b/s/code/x.tar.gz", file="f.py"))
    pod = job["spec"]["template"]
    [container] = [c for c in pod["spec"]["containers"] if c["name"] == "primary"]
    node = NodeEnv.from_env({e["name"]: e["value"] for e in container["env"] if "value" in e})
    assert profile_from_text(node.profile, contract.PROFILE) == pod_body.spec().env.profile
    assert nsys_profiled(node, 0)  # its launcher starts the one rank as nsys_rank
    assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                            "capabilities": {"add": ["SYS_ADMIN"]}}
    assert pod["metadata"]["annotations"][
        "container.apparmor.security.beta.kubernetes.io/primary"] == "unconfined"
