"""The local run records: real SQLite files, real processes writing at once, real SIGKILLs."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import psutil
import pytest

from shoal._storage.records import SCHEMA_VERSION, TERMINAL_STATES, Records
from shoal.errors import NotFoundError, ShoalSystemError, SpecError
from tests.helpers import wait_until

SRC = Path(__file__).resolve().parents[2] / "src"
RUN_ARGS: dict[str, Any] = {
    "task": "main",
    "code_file": "pipeline.py",
    "engine": "local",
    "store": "file:///tmp/store",
}


@pytest.fixture
def records(tmp_path: Path) -> Any:
    with Records(tmp_path / "shoal.db") as r:
        yield r


# --- schema and file --------------------------------------------------------------------------
def test_schema_version_and_pragmas(tmp_path: Path) -> None:
    Records(tmp_path / "shoal.db").close()
    conn = sqlite3.connect(tmp_path / "shoal.db")
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"meta", "runs", "actions", "attempts", "events"} <= tables
    conn.close()
    Records(tmp_path / "shoal.db").close()  # reopening an existing file is fine


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    Records(tmp_path / "shoal.db").close()
    conn = sqlite3.connect(tmp_path / "shoal.db")
    conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(ShoalSystemError, match=r"schema version 999.*upgrade shoal"):
        Records(tmp_path / "shoal.db")


def test_default_path_is_in_shoal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOAL_HOME", str(tmp_path / "home"))
    with Records() as r:
        assert r.path == tmp_path / "home" / "shoal.db"
    assert (tmp_path / "home" / "shoal.db").exists()


# --- lifecycle ----------------------------------------------------------------------------------
def test_run_action_attempt_event_lifecycle(records: Records) -> None:
    run = records.create_run(name="r-1", inputs={"n": 3, "s": "x"}, **RUN_ARGS)
    assert (run.state, run.inputs, run.engine_pid, run.cancel_requested) == (
        "queued",
        {"n": 3, "s": "x"},
        os.getpid(),
        False,
    )
    assert run.engine_started_at == pytest.approx(psutil.Process().create_time(), abs=1)
    assert run.started_at is None and not run.terminal

    assert records.set_run_state("r-1", "running")
    records.heartbeat("r-1")
    run = records.get_run("r-1")
    assert run.state == "running" and run.started_at is not None and run.heartbeat_at is not None

    action = records.create_action(
        run="r-1", action_id="a0", parent_id=None, task="train", env="gpu", inputs={"lr": 0.1}
    )
    assert (action.state, action.inputs, action.cache_hit) == ("queued", {"lr": 0.1}, False)
    # get-or-create: a repeated call returns the record as it is
    assert (
        records.create_action(
            run="r-1", action_id="a0", parent_id=None, task="train", env="gpu", inputs={}
        )
        == action
    )
    with pytest.raises(ShoalSystemError, match="already recorded for task 'train'"):
        records.create_action(run="r-1", action_id="a0", task="other", env="gpu", inputs={})

    records.set_action_state("r-1", "a0", "running")
    records.start_attempt("r-1", "a0", 0, pid=111, log_path=Path("/logs/a0/0.log"))
    records.finish_attempt(
        "r-1", "a0", 0, state="failed", exit_code=-9, signal="SIGKILL", error="killed"
    )
    records.start_attempt("r-1", "a0", 1, pid=112, log_path="/logs/a0/1.log")
    with pytest.raises(ShoalSystemError, match="already started"):
        records.start_attempt("r-1", "a0", 1, pid=113, log_path=None)
    records.finish_attempt("r-1", "a0", 1, state="succeeded", exit_code=0)
    records.set_action_state("r-1", "a0", "succeeded", outputs={"loss": 0.5})

    attempts = records.list_attempts("r-1", "a0")
    assert [(a.attempt, a.state, a.exit_code, a.signal) for a in attempts] == [
        (0, "failed", -9, "SIGKILL"),
        (1, "succeeded", 0, None),
    ]
    assert attempts[0].log_path == "/logs/a0/0.log" and attempts[0].ended_at is not None

    records.create_action(
        run="r-1", action_id="a1", parent_id="a0", task="eval", env="cpu", inputs={}, cache_key="k1"
    )
    records.set_action_state("r-1", "a1", "cached", outputs=[1, 2])
    a0, a1 = records.list_actions("r-1")
    assert (a0.state, a0.outputs, a0.started_at is not None, a0.terminal) == (
        "succeeded",
        {"loss": 0.5},
        True,
        True,
    )
    assert (a1.state, a1.cache_hit, a1.cache_key, a1.parent_id, a1.outputs) == (
        "cached",
        True,
        "k1",
        "a0",
        [1, 2],
    )

    first = records.add_event("r-1", "started", "run started")
    records.add_event("r-1", "action", "a0 done", action_id="a0", data={"loss": 0.5})
    events = records.events("r-1")
    assert [(e.kind, e.action_id, e.data) for e in events] == [
        ("started", None, None),
        ("action", "a0", {"loss": 0.5}),
    ]
    assert [e.message for e in records.events("r-1", after_id=first)] == ["a0 done"]

    assert records.set_run_state("r-1", "succeeded", outputs={"result": 1})
    run = records.get_run("r-1")
    assert (run.state, run.outputs, run.error, run.terminal) == (
        "succeeded",
        {"result": 1},
        None,
        True,
    )
    assert run.ended_at is not None and run.ended_at >= run.started_at  # type: ignore[operator]
    # a terminal state is final; cancelling an ended run does nothing
    assert not records.set_run_state("r-1", "failed", error="late")
    assert records.get_run("r-1").state == "succeeded"
    assert not records.request_cancel("r-1")
    assert not records.cancel_requested("r-1")


def test_a_failed_run_keeps_its_error_and_a_retry_reopens_an_action(records: Records) -> None:
    records.create_run(name="r-f", inputs={}, **RUN_ARGS)
    records.create_action(run="r-f", action_id="a", task="t", env="e", inputs={})
    records.set_action_state("r-f", "a", "failed", error="boom")
    assert records.get_action("r-f", "a").ended_at is not None
    records.set_action_state("r-f", "a", "running")  # a retry
    action = records.get_action("r-f", "a")
    assert (action.state, action.error, action.ended_at) == ("running", None, None)
    records.set_run_state("r-f", "failed", error="task 't' failed")
    assert records.get_run("r-f").error == "task 't' failed"


def test_cancel_request(records: Records) -> None:
    records.create_run(name="r-c", inputs={}, **RUN_ARGS)
    records.set_run_state("r-c", "running")
    assert not records.cancel_requested("r-c")
    assert records.request_cancel("r-c")
    assert records.cancel_requested("r-c")
    assert [e.kind for e in records.events("r-c")] == ["cancel_requested"]


def test_states_and_values_are_checked(records: Records) -> None:
    records.create_run(name="r-v", inputs={}, **RUN_ARGS)
    with pytest.raises(ValueError, match="run state 'done'"):
        records.set_run_state("r-v", "done")
    with pytest.raises(ValueError, match="action state 'crashed'"):
        records.set_action_state("r-v", "a", "crashed")
    with pytest.raises(TypeError, match="JSON-serializable"):
        records.set_run_state("r-v", "succeeded", outputs=object())
    with pytest.raises(SpecError, match="already exists"):
        records.create_run(name="r-v", inputs={}, **RUN_ARGS)
    assert {"succeeded", "failed", "cancelled", "crashed", "cached"} <= TERMINAL_STATES
    assert not TERMINAL_STATES & {"queued", "running"}


# --- names and lookups --------------------------------------------------------------------------
def test_generated_names_are_readable_sortable_and_unique(records: Records) -> None:
    name = records.new_run_name()
    assert re.fullmatch(r"r-\d{8}-\d{6}-[0-9a-f]{4}", name)
    names = [records.create_run(inputs={}, **RUN_ARGS).name for _ in range(50)]
    assert len(set(names)) == 50
    assert all(re.fullmatch(r"r-\d{8}-\d{6}-[0-9a-f]{4}", n) for n in names)
    assert sorted(n[:17] for n in names) == [n[:17] for n in names]  # the time part sorts


def test_get_run_by_prefix_and_not_found(records: Records) -> None:
    records.create_run(name="r-20261130-081233-3f9a", inputs={}, **RUN_ARGS)
    records.create_run(name="r-20261130-081233-3f00", inputs={}, **RUN_ARGS)
    records.create_run(name="r-20261201-000000-aaaa", inputs={}, **RUN_ARGS)
    assert records.get_run("r-20261130-081233-3f9").name == "r-20261130-081233-3f9a"
    assert records.get_run("r-202612").name == "r-20261201-000000-aaaa"
    with pytest.raises(NotFoundError, match=r"ambiguous.*give more of the name"):
        records.get_run("r-20261130")
    with pytest.raises(NotFoundError, match=r"no run named 'nope'.*see `shoal runs`"):
        records.get_run("nope")
    with pytest.raises(NotFoundError):
        records.get_run("")
    # user-facing cancel takes a prefix too
    assert records.request_cancel("r-202612")
    with pytest.raises(NotFoundError, match="see `shoal runs`"):
        records.heartbeat("nope")
    with pytest.raises(NotFoundError, match="nope"):
        records.add_event("nope", "k", "m")
    with pytest.raises(NotFoundError, match="nope"):
        records.create_action(run="nope", action_id="a", task="t", env="e", inputs={})


def test_unknown_actions_and_attempts(records: Records) -> None:
    records.create_run(name="r-a", inputs={}, **RUN_ARGS)
    records.create_action(run="r-a", action_id="train-0", task="t", env="e", inputs={})
    with pytest.raises(NotFoundError, match=r"no action 'train-1'.*did you mean 'train-0'"):
        records.get_action("r-a", "train-1")
    with pytest.raises(NotFoundError, match="no action"):
        records.set_action_state("r-a", "zzz", "running")
    with pytest.raises(NotFoundError, match="no action"):
        records.start_attempt("r-a", "zzz", 0, pid=1, log_path=None)
    with pytest.raises(NotFoundError, match="no attempt 3"):
        records.finish_attempt("r-a", "train-0", 3, state="failed")
    with pytest.raises(NotFoundError, match="no run named 'r-b'"):
        records.list_actions("r-b")


def test_list_runs_newest_first_with_limit_and_state(records: Records) -> None:
    for i in range(5):
        records.create_run(name=f"r-{i}", inputs={"i": i}, **RUN_ARGS)
    records.set_run_state("r-1", "running")
    records.set_run_state("r-3", "running")
    assert [r.name for r in records.list_runs()] == ["r-4", "r-3", "r-2", "r-1", "r-0"]
    assert [r.name for r in records.list_runs(limit=2)] == ["r-4", "r-3"]
    assert [r.name for r in records.list_runs(state="running")] == ["r-3", "r-1"]


# --- concurrency --------------------------------------------------------------------------------
def _write_runs(records: Records, worker: int, n_runs: int) -> None:
    """What an engine writes for a small run: two actions, each with an attempt and an event."""
    for i in range(n_runs):
        name = records.create_run(inputs={"worker": worker, "i": i}, **RUN_ARGS).name
        records.set_run_state(name, "running")
        for a in ("a0", "a1"):
            records.create_action(run=name, action_id=a, task="step", env="cpu", inputs={"a": a})
            records.set_action_state(name, a, "running")
            records.start_attempt(name, a, 0, pid=os.getpid(), log_path=f"/logs/{name}/{a}")
            records.finish_attempt(name, a, 0, state="succeeded", exit_code=0)
            records.set_action_state(name, a, "succeeded", outputs={"a": a, "i": i})
            records.add_event(name, "action_done", a, action_id=a, data={"i": i})
        records.heartbeat(name)
        records.set_run_state(name, "succeeded", outputs={"worker": worker, "i": i})


def _writer_process(path: str, worker: int, n_runs: int, results: Any) -> None:
    try:
        with Records(path) as records:
            _write_runs(records, worker, n_runs)
        results.put(("ok", worker))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def _reader_process(path: str, stop: Any, results: Any) -> None:
    """Reads while the writers write; what it sees must always be consistent."""
    try:
        passes = 0
        with Records(path) as records:
            while not stop.is_set() or passes == 0:
                assert records.reap_dead_runs() == []  # every writer is alive
                for run in records.list_runs(limit=None):
                    if run.state == "succeeded":  # written after its actions: they must show
                        actions = records.list_actions(run.name)
                        assert [a.state for a in actions] == ["succeeded", "succeeded"]
                        assert len(records.events(run.name)) == 2
                        assert run.outputs == run.inputs
                passes += 1
        results.put(("ok", passes))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def _check_all_written(path: Path, writers: int, n_runs: int) -> None:
    with Records(path) as records:
        runs = records.list_runs(limit=None)
        assert sorted((r.inputs["worker"], r.inputs["i"]) for r in runs) == [
            (w, i) for w in range(writers) for i in range(n_runs)
        ]
        for run in runs:
            assert run.state == "succeeded" and run.outputs == run.inputs
            actions = records.list_actions(run.name)
            assert [(a.action_id, a.state, a.outputs) for a in actions] == [
                (a, "succeeded", {"a": a, "i": run.inputs["i"]}) for a in ("a0", "a1")
            ]
            assert [t.state for t in records.list_attempts(run.name)] == ["succeeded"] * 2
            assert [e.data for e in records.events(run.name)] == [{"i": run.inputs["i"]}] * 2
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_concurrent_writer_processes_and_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "shoal.db"
    writers, n_runs = 4, 50
    ctx = mp.get_context("spawn")  # separate interpreters, like concurrent `shoal run`s
    results = ctx.Queue()
    stop = ctx.Event()
    Records(path).close()  # the schema exists before the crowd arrives, as after first use
    reader = ctx.Process(target=_reader_process, args=(str(path), stop, results))
    procs = [
        ctx.Process(target=_writer_process, args=(str(path), w, n_runs, results))
        for w in range(writers)
    ]
    reader.start()
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    stop.set()
    outcomes.append(results.get(timeout=60))
    for p in [*procs, reader]:
        p.join(timeout=10)
    errors = [text for kind, text in outcomes if kind == "error"]
    assert not errors, "\n".join(errors)
    assert all(p.exitcode == 0 for p in [*procs, reader])
    _check_all_written(path, writers, n_runs)


def test_concurrent_writers_on_a_fresh_file(tmp_path: Path) -> None:
    """Several processes creating the file and its schema at the same moment."""
    path = tmp_path / "fresh" / "shoal.db"
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_writer_process, args=(str(path), w, 3, results)) for w in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    errors = [text for kind, text in outcomes if kind == "error"]
    assert not errors, "\n".join(errors)
    _check_all_written(path, 4, 3)


def test_a_writer_waits_for_a_held_lock_and_says_so_when_it_gives_up(tmp_path: Path) -> None:
    path = tmp_path / "shoal.db"
    with Records(path) as records:
        records.create_run(name="r-w", inputs={}, **RUN_ARGS)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
        threading.Timer(0.3, holder.execute, args=("COMMIT",)).start()
        records.heartbeat("r-w")  # waits for the commit instead of failing
        assert records.get_run("r-w").heartbeat_at is not None
        holder.close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Records(path, busy_timeout_s=0.2) as impatient:
            assert impatient.get_run("r-w").name == "r-w"  # readers are never blocked
            with pytest.raises(ShoalSystemError, match="locked"):
                impatient.heartbeat("r-w")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_threads_share_one_records_object(tmp_path: Path) -> None:
    path = tmp_path / "shoal.db"
    errors: list[BaseException] = []
    with Records(path) as records:

        def work(worker: int) -> None:
            try:
                _write_runs(records, worker, 10)
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    _check_all_written(path, 6, 10)


# --- crashed engines ----------------------------------------------------------------------------
_ENGINE = """
import sys, time
from shoal._storage.records import Records
records = Records(sys.argv[1])
name = records.create_run(name=sys.argv[2], task="main", code_file="p.py", engine="local",
                          store="file:///s", inputs={}).name
records.set_run_state(name, "running")
for a in ("done", "busy", "waiting"):
    records.create_action(run=name, action_id=a, task="t", env="e", inputs={})
records.set_action_state(name, "done", "succeeded")
records.set_action_state(name, "busy", "running")
records.start_attempt(name, "busy", 0, pid=1, log_path="busy.log")
print("ready", flush=True)
time.sleep(120)
"""


def _start_engine(path: Path, name: str) -> subprocess.Popen[str]:
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [str(SRC)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _ENGINE, str(path), name],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def _assert_crashed(records: Records, name: str, pid: int) -> None:
    run = records.get_run(name)
    assert run.state == "crashed" and run.ended_at is not None
    assert run.error == f"the engine process (pid {pid}) died without finishing the run"
    states = {a.action_id: (a.state, a.error) for a in records.list_actions(name)}
    died = f"the engine process (pid {pid}) died before this finished"
    assert states == {
        "done": ("succeeded", None),
        "busy": ("failed", died),
        "waiting": ("failed", died),
    }
    [attempt] = records.list_attempts(name)
    assert (attempt.state, attempt.error) == ("crashed", died)
    assert [e.kind for e in records.events(name)] == ["run_crashed"]


def test_reap_marks_a_sigkilled_engine_crashed_and_spares_a_live_one(tmp_path: Path) -> None:
    path = tmp_path / "shoal.db"
    victim = _start_engine(path, "r-victim")
    alive = _start_engine(path, "r-alive")
    try:
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        with Records(path) as records:
            assert records.get_run("r-victim").state == "running"  # what the killed engine left
            assert records.reap_dead_runs() == ["r-victim"]
            _assert_crashed(records, "r-victim", victim.pid)
            assert records.get_run("r-alive").state == "running"
            assert records.reap_dead_runs() == []  # nothing twice, the live one never
            assert records.get_run("r-alive").state == "running"
    finally:
        _kill(victim)
        _kill(alive)


def test_reap_sees_through_a_zombie(tmp_path: Path) -> None:
    """A killed engine whose parent has not waited for it yet still has a pid: a zombie."""
    path = tmp_path / "shoal.db"
    victim = _start_engine(path, "r-zombie")
    try:
        victim.send_signal(signal.SIGKILL)
        wait_until("the killed engine to be a zombie",
                   lambda: psutil.Process(victim.pid).status() == psutil.STATUS_ZOMBIE,
                   timeout=10, every=0.01)
        with Records(path) as records:
            assert records.reap_dead_runs() == ["r-zombie"]
            _assert_crashed(records, "r-zombie", victim.pid)
    finally:
        _kill(victim)


def test_reap_tells_a_reused_pid_apart_and_ignores_other_hosts(tmp_path: Path) -> None:
    path = tmp_path / "shoal.db"
    with Records(path) as records:
        records.create_run(name="r-reused", inputs={}, **RUN_ARGS)  # this process's pid
        records.create_run(name="r-mine", inputs={}, **RUN_ARGS)
        records.create_run(
            name="r-remote", inputs={}, engine_pid=2**22 + 17, engine_host="elsewhere", **RUN_ARGS
        )
        # pretend r-reused's engine was an earlier process that happened to have our pid
        conn = sqlite3.connect(path)
        conn.execute(
            "UPDATE runs SET engine_started_at = engine_started_at - 3600 WHERE name = 'r-reused'"
        )
        conn.commit()
        conn.close()
        assert records.reap_dead_runs() == ["r-reused"]
        assert records.get_run("r-reused").state == "crashed"
        assert records.get_run("r-mine").state == "queued"
        assert records.get_run("r-remote").state == "queued"


def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("needs fork()")
    path = tmp_path / "shoal.db"
    with Records(path) as records:
        records.create_run(name="r-parent", inputs={}, **RUN_ARGS)
        ctx = mp.get_context("fork")
        child = ctx.Process(target=_fork_child, args=(records,))
        child.start()
        child.join(timeout=30)
        assert child.exitcode == 0
        assert records.get_run("r-child").inputs == {"from": "child"}
        assert records.get_run("r-parent").state == "queued"


def _fork_child(records: Records) -> None:
    records.create_run(name="r-child", inputs={"from": "child"}, **RUN_ARGS)
    records.close()
