"""Port tests: Flyte 2-style programs run as their users run them, `python prog.py`.

Each program in ``programs/`` is written after Flyte 2's public docs and examples (in this
repository, not copied from Flyte); its only Shoal-specific lines are ``import shoal as flyte``
and ``from shoal.io`` / ``from shoal.clustered`` imports where Flyte has the same module. Each
prints ``RESULT <key> <value>`` lines, which the tests check: values computed by the run, read
back through the run handle. The programs also run unchanged (but for the import) under Flyte
2.12's own local mode, apart from what its local mode leaves out (env vars, cache, trace replay,
run phase), which is how they were checked against Flyte's semantics.

Where Flyte's ``run.outputs()`` (a tuple) and Shoal's could print differently, the checks look
for the value inside the printed line, so both shapes pass; ``outputs_tuple.py`` alone checks
the tuple indexing Flyte code does (``run.outputs()[0]``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from shoal import _contract as contract
from shoal.plugins.nsight import DEFAULT_REPORTS

pytestmark = [pytest.mark.port, pytest.mark.slow]

PROGRAMS = Path(__file__).resolve().parent / "programs"


@dataclass
class Ran:
    program: str
    rc: int | None  # None: killed at the timeout
    stdout: str
    stderr: str

    def tails(self) -> str:
        return (f"--- {self.program}: exit {self.rc}\n--- stdout (tail)\n{self.stdout[-2500:]}"
                f"\n--- stderr (tail)\n{self.stderr[-5000:]}")

    def result(self, key: str) -> str:
        """The value of the program's last ``RESULT <key> ...`` line."""
        prefix = f"RESULT {key}"
        found = [line[len(prefix):].strip() for line in self.stdout.splitlines()
                 if line == prefix or line.startswith(prefix + " ")]
        if not found:
            pytest.fail(f"no '{prefix}' line in the output of {self.program}\n{self.tails()}")
        return found[-1]


def run_program(name: str, cwd: Path, home: Path, timeout: float = 180) -> Ran:
    """``python programs/<name>`` in ``cwd`` with SHOAL_HOME=``home`` (PYTHONPATH and the
    store set by conftest are inherited); it must exit 0."""
    env = os.environ.copy()
    env[contract.HOME] = str(home)
    out, err = cwd / f"{name}.stdout", cwd / f"{name}.stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        p = subprocess.Popen([sys.executable, str(PROGRAMS / name)], cwd=cwd, env=env,
                             stdout=o, stderr=e, start_new_session=True)
        try:
            rc: int | None = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with suppress(ProcessLookupError):  # its session: whatever it left running
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    ran = Ran(name, rc, out.read_text(errors="replace"), err.read_text(errors="replace"))
    if rc != 0:
        why = f"ran past {timeout:g} s" if rc is None else f"exited {rc}"
        pytest.fail(f"{name} {why}\n{ran.tails()}")
    return ran


def test_hello_maps_in_input_order_and_the_handle_has_name_url_phase(
        tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("hello_map.py", tmp_path, shoal_home)
    name, url = ran.result("name"), ran.result("url")
    assert name and url.startswith("http") and name in url, ran.tails()
    assert "succeeded" in ran.result("phase").lower(), ran.tails()
    assert "[5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25]" in ran.result("outputs"), ran.tails()


def test_map_aio_bounds_concurrency_and_returns_exceptions_in_input_order(
        tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("map_aio.py", tmp_path, shoal_home)
    out = ran.result("outputs")
    assert "'0', '1', '4', 'error', '16', '25'" in out, ran.tails()
    peak = re.search(r"peak=(\d+)", out)
    assert peak is not None and 1 <= int(peak[1]) <= 2, ran.tails()


def test_override_sets_env_vars_resources_and_retries_for_one_call(
        tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("override.py", tmp_path, shoal_home)
    assert "'from-env', 'from-override', 'plain-failed', '3'" in ran.result("outputs"), \
        ran.tails()
    assert (tmp_path / "plain").read_text() == "x"  # the task itself kept retries=0
    assert (tmp_path / "retried").read_text() == "xxx"


def test_groups_around_gathers(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("group.py", tmp_path, shoal_home)
    assert "succeeded" in ran.result("phase").lower(), ran.tails()
    assert "[0, 4, 8, 2, 6, 10]" in ran.result("outputs"), ran.tails()


def test_trace_steps_are_replayed_on_the_task_retry(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("trace_retry.py", tmp_path, shoal_home)
    assert re.search(r"\b14\b", ran.result("outputs")), ran.tails()
    assert ran.result("attempts") == "2", ran.tails()
    # Each traced step ran once: the second attempt took the first one's recorded outputs.
    assert ran.result("executed") == "['0', '1', '2', '3']", ran.tails()


def _report_text(run: str, cwd: Path) -> str:
    """What `shoal report RUN` gives: its stdout, the HTML files it wrote where it ran, and
    any file it names."""
    cwd.mkdir()
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "report", run], cwd=cwd,
                       capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert p.returncode == 0, f"shoal report {run}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    texts = [p.stdout]
    named = {Path(w.strip("'\"`.,:;()")) for w in (p.stdout + p.stderr).split()}
    candidates = [*named, *(cwd / n for n in named if not n.is_absolute())]
    for path in [*cwd.rglob("*.htm*"), *(n for n in candidates if n.is_file())]:
        texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def test_report_tabs_log_replace_are_kept_with_the_run(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("report.py", tmp_path, shoal_home)
    first, second = ran.result("runs").split()
    assert re.search(r"\b10\b.*\b9\b", ran.result("outputs")), ran.tails()

    async_report = _report_text(first, tmp_path / "first")
    assert "port-report-main total=10" in async_report
    assert "port-report-details-tab" in async_report
    sync_report = _report_text(second, tmp_path / "second")
    assert "port-report-replacement max=9" in sync_report
    assert "port-report-replaced-away" not in sync_report  # replace() swapped it out


def test_with_runcontext_name_env_vars_and_overwrite_cache(
        tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("runcontext.py", tmp_path, shoal_home)
    assert "unset:1" in ran.result("first"), ran.tails()
    assert "unset:1" in ran.result("second"), ran.tails()  # a cache hit: the body did not run
    assert "unset:2" in ran.result("third"), ran.tails()  # overwrite_cache: it ran again
    assert ran.result("visits") == "2", ran.tails()
    fourth = ran.result("fourth")
    assert fourth.startswith("port-ctx-named ") and "mango:" in fourth, ran.tails()


def test_io_file_and_dir_move_between_tasks(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("io_file_dir.py", tmp_path, shoal_home)
    assert "[5, 60, 285, 400]" in ran.result("pipeline"), ran.tails()
    assert re.search(r"\b3\b", ran.result("uploaded")), ran.tails()


def test_io_dataframe_and_pandas_frames(tmp_path: Path, shoal_home: Path) -> None:
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    ran = run_program("io_dataframe.py", tmp_path, shoal_home)
    assert "[30, 3]" in ran.result("outputs"), ran.tails()


def test_no_return_annotation_and_a_run_not_waited_for(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("no_return.py", tmp_path, shoal_home)
    out = ran.result("outputs")
    assert "None" in out or out == "()", ran.tails()
    assert (tmp_path / "waited.txt").exists(), ran.tails()
    # The script exited right after starting this run; the run finished all the same.
    marker = tmp_path / "not-waited.txt"
    assert marker.exists(), ran.tails()
    assert marker.read_text() == "written to not-waited.txt by a task with no return annotation"


def test_pydantic_models_and_str_enums_round_trip(tmp_path: Path, shoal_home: Path) -> None:
    pytest.importorskip("pydantic")
    ran = run_program("pydantic_enum.py", tmp_path, shoal_home)
    assert "shirt 3750 red->green Quote/Color/Color" in ran.result("main"), ran.tails()
    quote = ran.result("quote")
    assert "shirt" in quote and "3750" in quote, ran.tails()


def test_flyte_accelerator_names(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("accelerators.py", tmp_path, shoal_home)
    assert "[5, 40]" in ran.result("outputs"), ran.tails()


def test_a_failed_run_raises_on_wait_and_outputs(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("failed_run.py", tmp_path, shoal_home)
    assert ran.result("wait").startswith("raised "), ran.tails()
    assert "budget exceeded: 7 > 5" in ran.result("wait"), ran.tails()
    assert "failed" in ran.result("phase").lower(), ran.tails()
    assert "budget exceeded: 7 > 5" in ran.result("outputs"), ran.tails()


def test_run_outputs_is_a_tuple_as_in_flyte(tmp_path: Path, shoal_home: Path) -> None:
    ran = run_program("outputs_tuple.py", tmp_path, shoal_home)
    assert ran.result("first") == "PORT!", ran.tails()


def test_echo_and_sleep_calls_are_answered_by_the_driver_without_a_process(
        tmp_path: Path, shoal_home: Path) -> None:
    """An Echo root, then a driver calling a Sleep of 0.3 s and an Echo: outputs, records and
    logs as any call's; neither body ran and no worker of their environments started."""
    from shoal._storage.records import Records

    ran = run_program("echo_sleep.py", tmp_path, shoal_home)
    assert ran.result("echo") == "hello", ran.tails()
    echoed, slept = ran.result("main").split(" slept=")
    assert echoed == "hi" and 0.28 <= float(slept) < 3.0, ran.tails()
    assert not list(tmp_path.glob("*-body-ran")), ran.tails()
    alone, both = ran.result("runs").split()
    records = Records(shoal_home / "shoal.db")
    assert [(a.action_id, a.task, a.state, a.outputs) for a in records.list_actions(alone)] \
        == [("a0", "port-echo.echo_identity", "succeeded", "hello")]
    assert [(a.action_id, a.task, a.state, a.outputs) for a in records.list_actions(both)] == [
        ("a0", "port-echo-sleep.main", "succeeded", f"hi slept={slept}"),
        ("a0.1", "port-sleep.sleep_for", "succeeded", None),
        ("a0.2", "port-echo.echo_identity", "succeeded", "hi")]
    sleep_log = (shoal_home / "runs" / both / "logs" / "a0.1.0.log").read_text()
    assert "port-sleep.sleep_for: slept 0.3s" in sleep_log, sleep_log
    # The worker logs (the template that forks them logs beside them): the driver's only.
    workers = sorted(p.name for p in (shoal_home / "runs" / both / "workers").iterdir()
                     if p.name != "template.log")
    assert workers and all(w.startswith("port-echo-sleep-") for w in workers), workers
    assert not (shoal_home / "runs" / alone / "workers").exists()


def test_ddp_written_for_gpus_runs_on_emulated_gpus(tmp_path: Path, shoal_home: Path) -> None:
    pytest.importorskip("torch")
    ran = run_program("ddp_gpu.py", tmp_path, shoal_home, timeout=240)
    m = re.search(r"world=(\d+) rank_sum=(\d+) in_sync=(\w+) loss=([\d.]+)", ran.result("outputs"))
    assert m is not None, ran.tails()
    assert (m[1], m[2], m[3]) == ("2", "1", "True"), ran.tails()
    assert float(m[4]) < 0.1, ran.tails()  # it trained: the first step's loss is about 5


def test_a_gang_with_flyte_wheels_in_its_image_restarts_and_trains_on_emulated_gpus(
        tmp_path: Path, shoal_home: Path) -> None:
    pytest.importorskip("torch")
    ran = run_program("ddp_wheels_restart.py", tmp_path, shoal_home, timeout=240)
    m = re.search(r"world=(\d+) restart=(\d+) in_sync=(\w+) loss=([\d.]+)",
                  ran.result("outputs"))
    assert m is not None, ran.tails()
    assert (m[1], m[2], m[3]) == ("2", "1", "True"), ran.tails()
    assert float(m[4]) < 0.1, ran.tails()
    assert "succeeded" in ran.result("phase").lower(), ran.tails()
    # One warning for the unguarded set_device (rank 0, on the attempt that reached it).
    # The ranks' logs stream to the program's stdout; the warning is rank 0's, once.
    assert ran.stdout.count("torch.cuda.set_device(0) does nothing") == 1, ran.tails()


def test_an_elastic_plugin_config_runs_ddp_as_a_two_node_gang(
        tmp_path: Path, shoal_home: Path) -> None:
    """Flyte's torch plugin example's shape: ``TaskEnvironment(plugin_config=Elastic(nnodes=2,
    nproc_per_node=1))`` runs the task as 2 nodes x 1 rank on the local engine."""
    pytest.importorskip("torch")
    ran = run_program("torch_elastic.py", tmp_path, shoal_home, timeout=240)
    m = re.search(r"world=(\d+) ctx_world=(\d+) nnodes=(\d+) nodes=([\d,]+) shards=([\d,]+) "
                  r"in_sync=(\w+) first_loss=([\d.]+) loss=([\d.]+)", ran.result("outputs"))
    assert m is not None, ran.tails()
    assert m.groups()[:6] == ("2", "2", "2", "0,1", "4,4", "True"), ran.tails()
    assert float(m[8]) < float(m[7]) / 10, ran.tails()  # it trained
    assert "succeeded" in ran.result("phase").lower(), ran.tails()
    assert "epoch 29: loss" in ran.stdout, ran.tails()  # rank 0's prints reach the program


def test_code_that_needs_cuda_fails_saying_the_gpus_were_emulated(
        tmp_path: Path, shoal_home: Path) -> None:
    pytest.importorskip("torch")
    ran = run_program("needs_cuda.py", tmp_path, shoal_home)
    error = ran.result("error")
    assert "AssertionError: no CUDA device visible" in error, ran.tails()
    assert "GPUs were emulated on CPU" in error and "--engine kubernetes" in error, ran.tails()
    assert "failed" in ran.result("phase").lower(), ran.tails()


def test_wandb_runs_of_parents_children_traces_and_what_needs_the_cloud(
        tmp_path: Path, shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.wandb_records import read_runs

    for name, value in (("WANDB_MODE", "offline"), ("WANDB_DIR", str(tmp_path)),
                        ("WANDB_SILENT", "true"), ("WANDB_CONSOLE", "off"),
                        ("WANDB_X_DISABLE_STATS", "true"), ("WANDB_X_DISABLE_META", "true"),
                        ("WANDB_API_KEY", "offline-runs-never-send-it")):
        monkeypatch.setenv(name, value)  # the key only satisfies the environment's Secret
    ran = run_program("wandb_tasks.py", tmp_path, shoal_home)
    base = f"{ran.result('name')}-a0"
    assert ran.result("parent") == base
    assert ran.result("new") == f"{base}.1 child-run child-task grandchild={base}.1"
    assert ran.result("shared") == f"{base} lr=None"  # auto: the caller's run
    assert ran.result("own") == f"{base}.3 lr=0.01"  # run_mode="new" from the block
    assert ran.result("traced") == base and ran.result("none") == "-1"
    assert ran.result("manual") == f"{base}.5"  # ctx().action.run_name / .name
    for key, what in (("sweep", "@wandb_sweep"), ("download", "download_logs=True")):
        assert what in ran.result(key) and "needs the W&B cloud" in ran.result(key)
    logged: dict[str, set[str]] = {}
    for run in read_runs(tmp_path / "wandb"):  # one offline folder per writing process
        assert run.project == "port-wandb", run
        logged.setdefault(run.run_id, set()).update(
            k for k in run.history if not k.startswith("_"))
    assert logged == {base: {"parent", "child_auto", "traced"},
                      f"{base}.1": {"child_new", "grandchild"}, f"{base}.3": {"child_auto"},
                      f"{base}.5": {"by_hand"}}
def test_nsight_profiles_two_regions_a_whole_task_and_rank_0_of_a_gang(
        tmp_path: Path, shoal_home: Path, stand_in_nsys: Path) -> None:
    """Flyte's nsight plugin shape: ``@nsys_profile`` above ``@env.task``, ``nsys.range``,
    ``nvtx.range``. Nsight Systems and a GPU are not here: a stand-in ``nsys`` is on PATH
    (tests/nsys_stand_in.py), which runs what it launches and refuses a start outside a
    session, a second collection at once, or a program whose session variable is not its."""
    pytest.importorskip("torch")
    ran = run_program("nsight_profile.py", tmp_path, shoal_home, timeout=240)
    assert ("regions total=999006 under_nsys=True | whole=42 | ddp sum=12 "
            "rank0_under_nsys=True") in ran.result("outputs"), ran.tails()
    run = ran.result("run")
    calls = [json.loads(line) for line in stand_in_nsys.read_text().splitlines()]
    launched = {c[-1]: c[1:-3] for c in calls if c[0] == "launch"}
    # Two plain tasks' workers and rank 0 of the gang, each in a session of its own; not rank 1.
    assert sorted(c[-1] for c in calls if c[0] == "launch") == [
        "shoal._runtime.node.rank", "shoal._runtime.worker", "shoal._runtime.worker"], calls
    assert len({c[1] for c in calls if c[0] == "launch"}) == 3, calls
    assert launched["shoal._runtime.node.rank"][1] == "--trace=cuda,nvtx", calls
    profiles = shoal_home / "runs" / run / "profiles"
    by_call = {}
    for path in sorted(profiles.rglob("*")):
        if path.is_file():
            call, _, window = path.parent.relative_to(profiles).parts
            by_call.setdefault(call, (window, []))[1].append(path.name)
    assert sorted(by_call.values()) == [
        ("regions", ["rank0.evaluation.nsys-rep", "rank0.evaluation.nsys-stats.txt",
                     "rank0.training.nsys-rep", "rank0.training.nsys-stats.txt"]),
        ("task", ["rank0.nsys-rep", "rank0.nsys-stats.txt"]),  # the gang's rank 0
        ("task", ["rank0.nsys-stats.txt"]),  # attach_report=False: the stats alone
    ], by_call
    flytes = ",".join(DEFAULT_REPORTS)  # `reports=` left out: flyte-sdk's five
    assert sorted(c[c.index("--report") + 1] for c in calls if c[0] == "stats") == [
        "cuda_api_sum", flytes, flytes, flytes], calls
    assert "stand-in nsys stats of" in (
        next(profiles.rglob("rank0.training.nsys-stats.txt")).read_text())
    listed = subprocess.run([sys.executable, "-m", "shoal.cli.main", "profile", run],
                            capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count(", regions: ") == 1 and listed.stdout.count(", task: ") == 2
    assert "rank0.evaluation.nsys-rep" in listed.stdout, listed.stdout
