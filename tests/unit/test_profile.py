"""`shoal.Profile`, the ``--profile`` syntax and its contract form, and the step summary on
small hand-made traces (the real ones are in tests/process/test_profiling.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

import shoal
from shoal._driver.run_options import RunOptions
from shoal._runtime.observe.profiling import check_profiles
from shoal._spec.call import ClusterSpec, EnvSpec
from shoal._spec.profile import ProfileSpec, parse_profile, profile_from_text
from shoal._storage import profile_summary as ps
from shoal.errors import SpecError


# -- the setting --------------------------------------------------------------------------------
def test_a_profile_defaults_to_every_rank_over_steps_10_to_12() -> None:
    spec = shoal.Profile().spec()
    assert spec == ProfileSpec(ranks=None, steps=(10, 12), seconds=None, tool="torch")
    assert spec.window == "steps-10-12"
    assert spec.profiles_rank(7)


def test_a_profile_keeps_sorted_ranks_and_a_seconds_window() -> None:
    spec = shoal.Profile(ranks=[3, 0], seconds=(30, 40), tool="nsys").spec()
    assert spec.ranks == (0, 3) and spec.steps is None and spec.seconds == (30.0, 40.0)
    assert spec.window == "seconds-30-40"
    assert spec.profiles_rank(3) and not spec.profiles_rank(1)


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"ranks": []}, "Profile.ranks", "non-empty"),
    ({"ranks": "0"}, "Profile.ranks", '"all"'),
    ({"ranks": [0, -1]}, "Profile.ranks", ">= 0"),
    ({"ranks": [1, 1]}, "Profile.ranks", "twice"),
    ({"steps": (12, 10)}, "Profile.steps", "first <= last"),
    ({"steps": (1.5, 3)}, "Profile.steps", "ints"),
    ({"steps": 10}, "Profile.steps", "pair"),
    ({"seconds": (5, 5)}, "Profile.seconds", "first < last"),
    ({"steps": (1, 2), "seconds": (1, 2)}, "Profile.seconds", "one window"),
    ({"tool": "perf"}, "Profile.tool", "torch, nsys"),
    ({"with_stack": 1}, "Profile.with_stack", "bool"),
])
def test_a_bad_profile_says_which_field_and_how_to_fix_it(kwargs: dict[str, Any], field: str,
                                                          words: str) -> None:
    with pytest.raises(SpecError) as e:
        shoal.Profile(**kwargs)
    assert e.value.field == field and words in str(e.value) and e.value.fix


def test_the_command_line_form_parses_into_the_same_profile() -> None:
    env, p = parse_profile("pretrain:ranks=0,3:steps=10-12:tool=nsys:shapes=1")
    assert env == "pretrain"
    assert p == shoal.Profile(ranks=[0, 3], steps=(10, 12), tool="nsys", record_shapes=True)
    assert parse_profile("train")[1] == shoal.Profile()
    assert parse_profile("train:ranks=all:seconds=30-40")[1] == shoal.Profile(seconds=(30, 40))


@pytest.mark.parametrize(("text", "words"), [
    (":steps=1-2", "environment name"),
    ("train:step=1-2", "is not one of"),
    ("train:steps=10", "range A-B"),
    ("train:steps=a-b", "range A-B"),
    ("train:ranks=0,x", "ranks like 0,3"),
    ("train:steps=1-2:seconds=1-2", "one window"),
    ("train:shapes=yes", "0 or 1"),
    ("train:tool=vtune", "torch, nsys"),
])
def test_a_bad_command_line_profile_is_refused(text: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_profile(text)


@pytest.mark.parametrize("profile", [
    shoal.Profile(), shoal.Profile(ranks=[0, 3], seconds=(0.5, 1.5), tool="nsys"),
    shoal.Profile(ranks=[2], steps=(0, 0), record_shapes=True, with_stack=True),
])
def test_the_contract_text_round_trips(profile: shoal.Profile) -> None:
    spec = profile.spec()
    assert profile_from_text(spec.to_text(), "SHOAL_PROFILE") == spec


def test_an_environment_takes_a_profile_into_its_spec_and_a_run_can_replace_it() -> None:
    env = shoal.TaskEnvironment(name="profiled_env", profile=shoal.Profile(ranks=[0]))
    assert env.spec().profile == ProfileSpec(ranks=(0,))
    other = ProfileSpec(steps=(1, 2))
    options = RunOptions(profiles={"profiled_env": other})
    assert options.apply_env(env.spec()).profile == other
    assert options.apply_env(EnvSpec(name="elsewhere")).profile is None
    with pytest.raises(SpecError, match=r"shoal\.Profile"):
        shoal.TaskEnvironment(name="bad_profile", profile="ranks=0")


def test_profiles_are_checked_against_the_world_size_and_the_tool_before_a_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gang = ClusterSpec(replicas=2, nproc_per_node=2, runtime="torch")
    with pytest.raises(SpecError, match=r"world size \(4\)"):
        check_profiles([EnvSpec(name="g", cluster=gang, profile=ProfileSpec(ranks=(4,)))],
                       local=True)
    jax = ClusterSpec(replicas=2, nproc_per_node=1, runtime="jax")
    with pytest.raises(SpecError, match="JaxRun ranks run JAX"):
        check_profiles([EnvSpec(name="j", cluster=jax, profile=ProfileSpec())], local=True)
    with pytest.raises(SpecError, match="clustered task"):
        check_profiles([EnvSpec(name="p", profile=ProfileSpec(tool="nsys"))], local=True)
    monkeypatch.setenv("PATH", "/nonexistent")
    nsys = EnvSpec(name="g", cluster=gang, profile=ProfileSpec(tool="nsys"))
    with pytest.raises(SpecError, match=r"nsys.*on PATH") as e:
        check_profiles([nsys], local=True)
    assert "tool=torch" in e.value.fix
    check_profiles([nsys], local=False)  # a pod's image is not this machine


def test_profile_region_is_a_no_op_that_imports_nothing_when_off() -> None:
    code = ("import sys, shoal\n"
            "with shoal.profile_region('data'):\n    pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
    with pytest.raises(SpecError), shoal.profile_region(""):
        pass


# -- the summary on hand-made traces ---------------------------------------------------------
def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def step(n: int, ts: float, dur: float) -> dict[str, Any]:
    return op(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def trace(*events: dict[str, Any]) -> dict[str, Any]:
    return {"traceEvents": [*events, op("PyTorch Profiler (0)", 0, 10_000, cat="Trace")]}


def test_interval_arithmetic() -> None:
    a = ps.merge([(0, 10), (5, 15), (20, 30)])
    assert a == [(0, 15), (20, 30)]
    assert ps.intersect(a, [(10, 25)]) == [(10, 15), (20, 25)]
    assert ps.subtract(a, [(2, 4), (12, 22)]) == [(0, 2), (4, 12), (22, 30)]
    assert ps.length(a) == 25


def test_a_step_is_split_into_compute_data_exposed_communication_and_idle() -> None:
    # one 1000 us step: 100 us of data, 400 us of matmul, a gloo all_reduce of 600 us on
    # gloo's thread of which 200 us under the matmul, then 100 us of nothing
    t = trace(step(5, 0, 1000),
              op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 100,
                 cat="user_annotation"),
              op("aten::stack", 10, 50),  # collating: data loading, not compute
              op("aten::mm", 100, 400), op("aten::resolve_conj", 110, 5),
              op("c10d::allreduce_", 500, 10), op("aten::empty", 502, 1),  # inside: comm
              op("gloo:all_reduce", 300, 600, tid=9, cat="user_annotation"))
    (s,) = ps.rank_summary(0, t)["steps"]
    assert s["step"] == 5 and s["total_ms"] == pytest.approx(1.0)
    assert s["data_ms"] == pytest.approx(0.1)
    assert s["compute_ms"] == pytest.approx(0.4)
    assert s["comm_total_ms"] == pytest.approx(0.6)
    assert s["comm_overlap_ms"] == pytest.approx(0.2)
    assert s["comm_ms"] == pytest.approx(0.4)  # exposed: 500-900
    assert s["idle_ms"] == pytest.approx(0.1)


def test_shoal_data_regions_count_as_data_loading() -> None:
    t = trace(step(0, 0, 100), op("shoal/data", 0, 80, cat="user_annotation"),
              op("aten::add", 85, 10))
    summary = ps.rank_summary(0, t)
    assert summary["bound"] == "data" and summary["shares"]["data"] == pytest.approx(0.8)


def test_on_gpu_the_kernels_are_the_compute_and_nccl_kernels_the_communication() -> None:
    t = trace(step(1, 0, 1000),
              op("aten::mm", 0, 900),  # the CPU only launches: not counted on GPU traces
              op("sm90_gemm", 0, 300, tid=7, cat="kernel"),
              op("ncclDevKernel_AllReduce_Sum_f32", 200, 700, tid=8, cat="kernel"))
    (s,) = ps.rank_summary(0, t)["steps"]
    assert s["compute_ms"] == pytest.approx(0.3)
    assert s["comm_total_ms"] == pytest.approx(0.7)
    assert s["comm_overlap_ms"] == pytest.approx(0.1)
    assert s["comm_ms"] == pytest.approx(0.6)


def test_a_trace_without_steps_is_one_window() -> None:
    (s,) = ps.rank_summary(0, trace(op("aten::mm", 100, 300), op("aten::mm", 500, 100)))["steps"]
    assert s["step"] is None and s["total_ms"] == pytest.approx(0.5)
    assert s["compute_ms"] == pytest.approx(0.4)


def _rank(comm: float, data: float, compute: float) -> dict[str, Any]:
    total = 100.0
    events = [step(0, 0, total)]
    at = 0.0
    for name, dur, tid, cat in (("shoal/data", data, 1, "user_annotation"),
                                ("aten::mm", compute, 1, "cpu_op"),
                                ("gloo:all_reduce", comm, 9, "user_annotation")):
        if dur:
            events.append(op(name, at, dur, tid=tid, cat=cat))
            at += dur
    return trace(*events)


def test_the_verdict_names_the_bound_and_where_it_holds() -> None:
    s = ps.summarize({0: _rank(10, 61, 20), 1: _rank(10, 61, 20)})
    assert s["verdict"] == "data-bound: 61% of step time waiting for data, on all ranks"
    s = ps.summarize({0: _rank(70, 0, 20), 1: _rank(70, 0, 20), 2: _rank(5, 0, 90)})
    assert s["verdict"].startswith("communication-bound: 70% of step time waiting in "
                                   "collectives")
    assert s["verdict"].endswith("on ranks 0, 1 (rank 2: compute-bound (90%))")


def test_the_straggler_is_the_rank_that_waits_least_in_collectives() -> None:
    s = ps.summarize({0: _rank(80, 0, 10), 1: _rank(2, 0, 10), 2: _rank(78, 0, 10)})
    assert s["stragglers"]["straggler"] == 1
    assert s["stragglers"]["text"].startswith("rank 1 is the straggler")
    assert "<- straggler" in ps.render(s)
    even = ps.summarize({0: _rank(30, 0, 60), 1: _rank(28, 0, 60)})
    assert even["stragglers"]["straggler"] is None
    assert even["stragglers"]["text"].startswith("no straggler")


# -- where nsys comes in ------------------------------------------------------------------------
def _node(profile: str) -> Any:
    from shoal._contract import NodeEnv

    return NodeEnv(home="/h", store="file:///s", run="r", action="a0", attempt=0, env_name="e",
                   code_file="/c.py", task="e.t", io="file:///s/io", node_rank=1, nnodes=2,
                   nproc_per_node=2, master_addr="127.0.0.1", master_port=1234,
                   restart_attempt=0, profile=profile)


def test_only_the_chosen_ranks_run_under_nsys_and_torchrun_starts_them_through_its_wrapper(
        ) -> None:
    from shoal._runtime.node.rank_start import nsys_profiled, torchrun_argv

    node = _node(ProfileSpec(ranks=(3,), tool="nsys").to_text())
    assert [r for r in range(4) if nsys_profiled(node, r)] == [3]
    assert torchrun_argv(node)[-2:] == ["-m", "shoal._runtime.node.nsys_rank"]
    torch_profiled = _node(ProfileSpec(ranks=(3,)).to_text())
    assert not nsys_profiled(torch_profiled, 3)
    assert torchrun_argv(torch_profiled)[-2:] == ["-m", "shoal._runtime.node.rank"]
    assert "SHOAL_PROFILE" not in _node("").to_env()  # an unprofiled node carries nothing


def test_the_nsys_command_line_follows_the_window(tmp_path: Any) -> None:
    from shoal._runtime.node.nsys_rank import profile_argv

    out = tmp_path / "rank3"
    seconds = profile_argv("/bin/nsys", ProfileSpec(seconds=(30, 40), steps=None, tool="nsys"),
                           out, capture_steps=False)
    assert seconds[:6] == ["/bin/nsys", "profile", "-o", str(out), "--trace=cuda,nvtx,osrt",
                           "--force-overwrite=true"]
    assert seconds[6:8] == ["--delay=30", "--duration=10"]
    assert seconds[-3:] == [sys.executable, "-m", "shoal._runtime.node.rank"]
    steps = profile_argv("/bin/nsys", ProfileSpec(tool="nsys"), out, capture_steps=True)
    assert "--capture-range=cudaProfilerApi" in steps and "--capture-range-end=stop" in steps
    whole = profile_argv("/bin/nsys", ProfileSpec(tool="nsys"), out, capture_steps=False)
    assert not any(a.startswith(("--capture-range", "--delay")) for a in whole)


def test_profile_on_the_command_line_is_refused_for_a_kubernetes_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    from shoal.cli.main import main

    assert main(["run", "--engine", "kubernetes", "--profile", "train", "f.py", "t"]) == 2
    err = capsys.readouterr().err
    assert "driver pod" in err and "profile=shoal.Profile(...)" in err


def test_the_metrics_writer_tells_a_profiler_of_each_step_even_an_empty_report(
        tmp_path: Any) -> None:
    from shoal._runtime.observe import metrics

    seen: list[int] = []
    with metrics.metrics_scope(str(tmp_path), "r", "a0", 0, rank=0) as writer:
        shoal.log_metrics({"loss": 1.0}, step=3)  # no hook: nothing else happens
        writer.on_step = seen.append
        shoal.log_metrics({}, step=4)  # marks a step, stores nothing
        shoal.log_metrics({"loss": 1.0})  # the step after the last: 5
    assert seen == [4, 5]


def test_off_a_rank_imports_no_torch_and_its_writer_has_no_hook(tmp_path: Any) -> None:
    code = ("import sys\n"
            "from shoal._runtime.observe import metrics, profiling\n"
            f"with metrics.metrics_scope({str(tmp_path)!r}, 'r', 'a0', 0, rank=0) as w, \\\n"
            f"        profiling.profiling_scope(home={str(tmp_path)!r}, store='file:///x', "
            "run='r', action='a0', attempt=0, restart=0, rank=0):\n"
            "    print('torch' in sys.modules, w.on_step is None, profiling.active())\n")
    env = {k: v for k, v in os.environ.items() if k != "SHOAL_PROFILE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env).stdout.split()
    assert out == ["False", "True", "False"]
