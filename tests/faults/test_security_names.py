"""Untrusted names stay in their place (issue 22, names): a run name, an action id, a File's
name or a store key that tries to leave its folder or forge a line is refused where it enters,
and what renders a name (the sbatch script, the Kubernetes manifests, the dry-run text, the UI
pages) keeps its meaning for any text that slipped past.

The findings each test reproduces: `shoal run --name /abs` wrote /abs/logs at the filesystem
root, and a newline in it ended sbatch's directives (finding 1); a File named ``../../x``
downloaded outside its folder (2); records merged from a store were trusted for their action
ids, and the UI's cancel took a prefix of a run name (10). The Hypothesis properties use
tests/faults/test_fuzz.py's profiles (``SHOAL_FUZZ_PROFILE=deep`` runs a hundred times more).
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import shlex
import warnings
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="pip install hypothesis (the dev extra)")
from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import shoal  # noqa: E402
from shoal._engines.base import AttemptRef  # noqa: E402
from shoal._storage import codecs  # noqa: E402
from shoal._storage.records import PREEMPT_REQUEST, Records  # noqa: E402
from shoal._storage.store import get_dir, open_store  # noqa: E402
from shoal.cli.main import main  # noqa: E402
from shoal.errors import SpecError, StoreError  # noqa: E402

pytestmark = pytest.mark.faults

PLAIN_RUN = "r-20261201-120000-abcd"
BAD_RUN_NAMES = ["/abs", "../../tmp/evil", "a/b", "..", "a..b", "", "a\nb", "a\x00b",
                 "x\n#SBATCH --nodes=99", "$(touch pwned)", "-rf", "a b", "é" * 3, "r" * 64]
# Text a name may be made of: the usual, plus what breaks a path, a shell line or a directive.
WILD = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True),
    st.sampled_from(["../x", "/abs", "a\nb", "a\rb", "a\x00b", "$(id)", "`id`", "a'b", 'a"b',
                     "a;b", "a b", "\u2028", "x\n#SBATCH --nodes=99", "..", ".", "a/../b",
                     "\\x", "r" * 300]),
)
PROGRAM = '''
import shoal
env = shoal.TaskEnvironment(name="plain")

@env.task
def hello() -> int:
    return 1
'''


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


def _one_line_spec_error(err: str, field: str) -> None:
    assert err.count("\n") == 1, err  # one line
    assert field in err and "a run name is" in err and "Fix:" in err, err


# --- finding 1: `shoal run --name` (and every verb's RUN) -----------------------------------

@pytest.mark.parametrize("bad", BAD_RUN_NAMES)
def test_the_cli_refuses_a_run_name_that_is_not_a_name(bad: str, program: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["run", "--dry-run", f"--name={bad}", str(program), "hello"]) == 2
    _one_line_spec_error(capsys.readouterr().err, "--name")
    assert main(["run", f"--resume={bad}"]) == 2
    _one_line_spec_error(capsys.readouterr().err, "--resume")


@pytest.mark.parametrize("verb", ["logs", "cancel", "preempt", "metrics", "profile", "report",
                                  "runs", "ui"])
@pytest.mark.parametrize("bad", ["../../etc", "/abs", "a\nb", "a\x00b"])
def test_every_verb_taking_a_run_refuses_one_that_is_not_a_name(
        verb: str, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb, bad]) == 2
    _one_line_spec_error(capsys.readouterr().err, "RUN")


def test_a_run_named_like_a_path_writes_nothing_outside_the_home(
        program: Path, tmp_path: Path, shoal_home: Path) -> None:
    """On main this ran the task, and its logs, metrics and workers folders appeared at the
    path the name spelled (`home / "runs" / "/abs"` is "/abs")."""
    outside = tmp_path / "abs"
    assert main(["run", "--name", str(outside), str(program), "hello"]) == 2
    assert main(["run", "--name", "../../escaped", str(program), "hello"]) == 2
    assert not outside.exists()
    assert not (shoal_home / "runs" / ".." / ".." / "escaped").exists()


@pytest.mark.parametrize("bad", ["/abs", "../x", "a\nb"])
def test_every_api_door_refuses_a_bad_run_name(bad: str, shoal_home: Path) -> None:
    from shoal._driver.runner import Runner

    env = shoal.TaskEnvironment(name="doors")

    @env.task
    def noop() -> None:
        return None

    with pytest.raises(SpecError, match="a run name is"):
        shoal.with_runcontext(name=bad)
    with pytest.raises(SpecError, match="a run name is"):
        Runner(noop.make_call((), {}, parent_action=None), name=bad)
    with pytest.raises(SpecError, match="a run name is"):
        Records(shoal_home / "shoal.db").create_run(name=bad, task="t", code_file="f",
                                                    engine="local", store="file:///s",
                                                    inputs={})


# --- finding 1: the sbatch script keeps its directives -------------------------------------

SLURM_PROGRAM = Path(__file__).parents[1] / "unit" / "slurm_program.py"


def _slurm_script(tmp_path: Path, run: str, task: str = "train") -> str:
    from shoal._engines.slurm.config import settings_from_mapping
    from shoal._engines.slurm.engine import SlurmEngine
    from shoal._runtime.loader import find_task
    from shoal._spec.call import CallSpec

    settings = settings_from_mapping({"partition": "batch", "python": "/opt/py/bin/python",
                                      "priority_classes": {"high": {"qos": "urgent"}}},
                                     "slurm.yaml")
    engine = SlurmEngine(run=run, home=tmp_path / "home", store="file:///shared/store",
                         settings=settings)
    call = CallSpec(task=find_task(SLURM_PROGRAM, task).spec(), inputs={}, parent_action="a0")
    ref = AttemptRef(run, "a0.1", 0, tmp_path / "home" / "runs" / "x.log")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an image with no container runtime
        return engine.job_plan(call, ref).script


def _directives(script: str) -> list[tuple[str, str]]:
    """What sbatch reads: the #SBATCH lines before the first line that is not a comment, as
    (option, value as the shell would split it)."""
    out = []
    for line in script.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            option, _, value = line.removeprefix("#SBATCH ").partition("=")
            out.append((option, " ".join(shlex.split(value)) if value else ""))
    return out


def test_a_newline_in_a_run_name_cannot_end_the_sbatch_directives(tmp_path: Path) -> None:
    """On main the run's comment line broke in two: `--nodes`, `--gres`, `--time` and the rest
    came after a shell line, and sbatch dropped them without a word."""
    plain = [o for o, _ in _directives(_slurm_script(tmp_path, PLAIN_RUN))]
    assert "--nodes" in plain and "--gpus-per-node" in plain and "--partition" in plain
    evil = "r-1\ntouch /tmp/pwned\n#SBATCH --nodes=99"
    try:
        script = _slurm_script(tmp_path, evil)
    except SpecError as e:
        assert "#SBATCH" in e.field or "run" in e.field
        return
    assert [o for o, _ in _directives(script)] == plain
    assert "touch /tmp/pwned" not in script.splitlines()


@given(run=WILD)
@example(run="x\n#SBATCH --nodes=99")
@example(run="$(touch pwned)")
@example(run="a'b")
@example(run="../x")
@example(run="..")
def test_any_run_name_leaves_the_sbatch_directives_as_they_are(run: str,
                                                               tmp_path_factory: Any) -> None:
    tmp = tmp_path_factory.mktemp("sbatch")
    plain = _directives(_slurm_script(tmp, PLAIN_RUN))
    try:
        script = _slurm_script(tmp, run)
    except SpecError:
        return  # refused: nothing rendered
    got = _directives(script)
    assert [o for o, _ in got] == [o for o, _ in plain]
    values = dict(got)
    assert values["--job-name"] == f"shoal-{run}-a0.1-0"  # the same word, quoted or not
    home = os.path.normpath(tmp / "home" / "runs")
    assert os.path.normpath(values["--output"]).startswith(home + os.sep)  # under its root


# --- the dry-run text ---------------------------------------------------------------------

@given(run=WILD, value=WILD)
@example(run="a\nenv:\n    FAKE=1", value="x\n  note:     forged")
def test_the_dry_run_text_keeps_one_value_per_line(run: str, value: str) -> None:
    from shoal._contract import WorkerEnv
    from shoal._engines.local.plan import plan_process
    from shoal._engines.local.pool import Request

    def render(run: str, value: str) -> list[str]:
        env = shoal.TaskEnvironment("dry", env_vars={"GREETING": value})
        wenv = WorkerEnv(home="/h", store="file:///s", env_name="dry", code_file="/f.py",
                         worker_id="dry-w0", controller="/tmp/x/ctl.sock", run=run)
        plan = plan_process(env.spec(), capacity=Request(2, 2**34, 0), wenv=wenv, base={},
                            priorities={})
        return plan.render(base={}).split("\n")

    plain = render(PLAIN_RUN, "hello")
    try:
        lines = render(run, value)
    except SpecError:
        return  # refused at entry
    assert len(lines) == len(plain) and all(line.isprintable() for line in lines)
    assert [line.split("=")[0] for line in lines] == [line.split("=")[0] for line in plain]


# --- Kubernetes manifests -----------------------------------------------------------------

def _shape(value: Any, at: str = "") -> set[str]:
    """Every key path of a manifest (list items by index): its structure without its values."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{at}/{k}"} | _shape(v, f"{at}/{k}")}
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in _shape(v, f"{at}[{i}]")}
    return set()


@given(run=WILD)
@example(run="a\nkind: Secret")
@example(run="../../other-run")
def test_any_run_name_leaves_the_manifests_valid_and_shaped_alike(run: str) -> None:
    import yaml

    from shoal._engines.kubernetes import compile_call, validate
    from shoal._engines.kubernetes.manifests import to_yaml
    from tests.kubernetes import seed_program
    from tests.kubernetes.conftest import CODE, CONFIG, call_of

    def compiled(run: str) -> list[dict[str, Any]]:
        return [o for task, action in ((seed_program.prepare, "a0.0"),
                                       (seed_program.train, "a0.1"))
                for o in compile_call(call_of(task), run=run, action=action, attempt=0,
                                      config=CONFIG, code=CODE)]

    plain = compiled(PLAIN_RUN)
    try:
        objects = compiled(run)
    except SpecError:
        return
    validate.check(objects)  # names and labels are what the API server accepts
    assert [_shape(o) for o in objects] == [_shape(o) for o in plain]
    assert list(yaml.safe_load_all(to_yaml(objects))) == objects  # quoting is structural
    root = CONFIG.store.removeprefix("s3://")
    for uri in [v for o in objects for v in _strings(o) if v.startswith(CONFIG.store)]:
        path = posixpath.normpath(uri.removeprefix("s3://"))
        assert path == root or path.startswith(root + "/"), uri  # no path leaves the store


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


# --- the UI's pages -----------------------------------------------------------------------

class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.run: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "body":
            self.run = dict(attrs).get("data-run")


@given(run=WILD)
@example(run='"><script>alert(1)</script>')
def test_a_run_page_holds_the_name_as_text_whatever_it_is(run: str) -> None:
    from shoal._ui import pages

    def parsed(run: str) -> _Tags:
        p = _Tags()
        p.feed(pages.run_page(run))
        return p

    if not run:
        return  # no run: the page of all runs' frame, no name in it
    got, plain = parsed(run), parsed(PLAIN_RUN)
    assert got.tags == plain.tags and got.run == run


# --- finding 2: File and Dir names --------------------------------------------------------

@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    root = tmp_path / "store"
    root.mkdir()
    (root / "data.txt").write_text("payload")
    monkeypatch.setenv("SHOAL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHOAL_STORE", root.as_uri())
    return open_store(root.as_uri())


@pytest.mark.parametrize("bad", ["/x", "../../x", "a/../../x", "..", ".", "a\\b", "a\nb",
                                 "a\x00b", "a//b", ""])
def test_a_file_named_to_leave_its_folder_is_refused_when_made_or_decoded(
        store: Any, bad: str) -> None:
    uri = f"{store.root}/data.txt"
    if bad:  # "" means: the name of the path
        with pytest.raises(SpecError, match="object name"):
            shoal.File(uri, name=bad)
        with pytest.raises(SpecError, match="object name"):
            shoal.Dir(store.root, name=bad)
    with pytest.raises(SpecError, match=r"object name|name"):
        codecs.decode({"path": uri, "name": bad or "../x", "hash": None, "format": ""},
                      shoal.File, blobs=None, field="input")


def test_a_file_whose_name_climbs_is_not_downloaded_outside_its_folder(
        store: Any, tmp_path: Path) -> None:
    """On main `download_sync()` of a File named ``../../x`` wrote above the downloads
    folder: a poisoned cache entry could overwrite ~/.bashrc."""
    good = shoal.File(f"{store.root}/data.txt")
    bad = dataclasses.replace(good)  # a value built around __init__'s check
    object.__setattr__(bad, "name", "../../../pwned.txt")
    with pytest.raises(SpecError, match="object name"):
        bad.download_sync()
    target = tmp_path / "dest"
    target.mkdir()
    with pytest.raises(SpecError, match="object name"):
        bad.download_sync(target)
    assert not any(p.name == "pwned.txt" for p in tmp_path.rglob("*"))
    assert Path(good.download_sync()).read_text() == "payload"


def test_a_store_key_that_climbs_out_of_a_folder_download_is_refused(tmp_path: Path) -> None:
    """A bucket may hold ``prefix/../../x`` (S3 keys are free text): `get_dir` joins the key
    under the local folder, so it refuses one that would climb out."""

    got: list[str] = []

    class Listing:
        parallelism = 1

        def list(self, uri: str) -> list[str]:
            return [f"{uri}/ok.txt", f"{uri}/../../../pwned.txt"]

        def get_file(self, src: str, dest: Path) -> None:  # pragma: no cover - refused first
            got.append(src)

    with pytest.raises(SpecError, match="object name"):
        get_dir(Listing(), "s3://bucket/prefix", tmp_path / "dl")  # type: ignore[arg-type]
    assert got == []


# --- finding 10: records merged from a store, and the UI's acts --------------------------

def _published(tmp_path: Path, records: Records, snap_changes: dict[str, Any],
               logs: dict[str, str] | None = None) -> Any:
    """A run driven elsewhere whose driver folder holds ``snap_changes`` merged into a
    snapshot of a plain run."""
    from shoal._storage.records import RECORDS, SUBMITTED

    store_root = tmp_path / "remote-store"
    store = open_store(store_root.as_uri())
    run = records.create_run(name="r-remote", task="m.main", code_file="m.py",
                             engine="kubernetes", store=store.root, inputs={},
                             driven_elsewhere="kubernetes")
    io = f"{store.root}/runs/r-remote/driver"
    records.add_event(run.name, SUBMITTED, "submitted", data={"io": io})
    snap = {"run": {"state": "running", "error": None, "started_at": 1.0, "ended_at": None,
                    "heartbeat_at": 1.0}, "actions": [], "attempts": [], "events": []}
    snap.update(snap_changes)
    store.put_bytes(f"{io}/{RECORDS}", json.dumps(snap).encode())
    for name, text in (logs or {}).items():
        path = store_root / "runs" / "r-remote" / "driver" / "logs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return records.get_run(run.name)


def _action(action_id: str, **changes: Any) -> dict[str, Any]:
    from shoal._storage.records import ActionRecord

    return {**dataclasses.asdict(ActionRecord(
        run="r-remote", action_id=action_id, parent_id=None, task="m.main", env="m",
        state="running", inputs={}, outputs=None, error=None, cache_key=None, cache_hit=False,
        created_at=1.0, started_at=1.0, ended_at=None)), **changes}


def _attempt(action_id: str) -> dict[str, Any]:
    from shoal._storage.records import AttemptRecord

    return dataclasses.asdict(AttemptRecord(
        run="r-remote", action_id=action_id, attempt=0, state="running", pid=None,
        log_path=None, exit_code=None, signal=None, error=None, started_at=1.0, ended_at=None))


@pytest.mark.parametrize("bad", ["../../../../pwned", "/abs", "a0\nforged", "a0/x"])
def test_records_merged_from_a_store_are_checked_for_their_action_ids(
        bad: str, tmp_path: Path, shoal_home: Path) -> None:
    """On main the attempt's log path became ``home/runs/<run>/logs/driver/<action>.0.log``
    with the action id as published: ``../../../../pwned`` pointed it outside the home."""
    from shoal._storage.records import refresh

    records = Records(shoal_home / "shoal.db")
    run = _published(tmp_path, records, {"actions": [_action(bad)], "attempts": [_attempt(bad)]})
    with pytest.raises(StoreError, match="action id"):
        refresh(records, run, home=shoal_home, full=True)
    assert records.find_action(run.name, bad) is None  # nothing of it merged
    assert all(a.log_path is None or Path(a.log_path).resolve().is_relative_to(shoal_home)
               for a in records.list_attempts(run.name))


def test_a_group_name_merged_from_a_store_cannot_forge_a_line(tmp_path: Path,
                                                             shoal_home: Path) -> None:
    from shoal._storage.records import refresh

    records = Records(shoal_home / "shoal.db")
    run = _published(tmp_path, records, {"actions": [_action("a0", group_path=["ok\nforged"])]})
    with pytest.raises(StoreError, match="printable"):
        refresh(records, run, home=shoal_home, full=True)


@pytest.mark.parametrize("key", ["gang/../../../../pwned.log", "../pwned.0.log",
                                 "a0/../../x.0.log", "no-attempt.log"])
def test_a_published_log_key_that_climbs_is_not_downloaded(
        key: str, tmp_path: Path, shoal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket's keys are free text; a file:// store cannot hold a '..' key, so the store
    here is one whose listing says what a bucket could (the records and the rest are real)."""
    from shoal._storage.records import remote

    records = Records(shoal_home / "shoal.db")
    run = _published(tmp_path, records, {})
    real = open_store(run.store)
    fetched: list[str] = []

    class Bucket:
        root = real.root

        def get_bytes(self, uri: str) -> bytes:
            return real.get_bytes(uri)

        def list(self, uri: str) -> list[str]:
            return [f"{uri}/{key}"]

        def get_file(self, uri: str, dest: Path) -> None:
            fetched.append(str(dest))

    monkeypatch.setattr(remote, "open_store", lambda uri: Bucket())
    with pytest.raises(StoreError, match=r"object name|published log"):
        remote.refresh(records, run, home=shoal_home, logs=True)
    assert fetched == []


def test_the_group_and_task_names_a_user_gives_are_checked() -> None:
    with pytest.raises(SpecError, match="printable"), shoal.group("epoch\n1"):
        pass  # pragma: no cover - refused on entry
    env = shoal.TaskEnvironment(name="named")
    with pytest.raises(SpecError, match="a task name is"):
        env.task(name="../evil")(lambda: None)


def test_the_ui_acts_only_on_a_whole_run_name(shoal_home: Path) -> None:
    """On main ``POST /api/runs/<prefix>/cancel`` cancelled the one run the prefix matched:
    a page naming one run could stop another. Reads keep taking a unique prefix."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from shoal._ui.app import build_app
    from shoal._ui.guard import allowed_hosts

    records = Records(shoal_home / "shoal.db")
    run = records.create_run(name="r-20261201-000000-aaaa", task="m.main", code_file="m.py",
                             engine="local", store="file:///s", inputs={})
    records.set_run_state(run.name, "running")
    app = build_app(shoal_home, token="t", hosts=allowed_hosts("127.0.0.1", 8484), port=8484)
    with TestClient(app, base_url="http://127.0.0.1:8484", follow_redirects=False) as client:
        auth = {"X-Shoal-Token": "t"}
        assert client.get("/api/runs/r-20261201", headers=auth).status_code == 200  # a read
        for verb in ("cancel", "preempt"):
            res = client.post(f"/api/runs/r-20261201/{verb}", headers=auth)
            assert res.status_code == 404, res.text
        assert not records.cancel_requested(run.name)
        assert [e for e in records.events(run.name) if e.kind == PREEMPT_REQUEST] == []
        bad = client.get("/api/runs/r-1..x", headers=auth)
        assert bad.status_code == 400 and "a run name is" in bad.json()["error"]
        bad = client.get(f"/api/runs/{run.name}/gangs/a0..x", headers=auth)
        assert bad.status_code == 400 and "an action id" in bad.json()["error"]
        res = client.post(f"/api/runs/{run.name}/cancel", headers=auth)
        assert res.status_code == 200 and records.cancel_requested(run.name)
