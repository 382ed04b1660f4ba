"""Attacks on what Shoal reads and writes: store keys and File/Dir paths that try to leave the
store, archives with entries that leave their folder, pickles nobody allowed, and secrets in
environment variables that must reach the task but never a plan, a record or a manifest.

The web UI's token is tested where the UI is: tests/ui/test_server.py
(test_a_request_without_the_token_is_refused, test_cancel_and_preempt_need_the_token_...).
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import io
import os
import pickle
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal._spec.call import frozen_map
from shoal._spec.secret_names import looks_secret, redacted
from shoal._storage import bundle, codecs
from shoal._storage.store import open_store
from shoal.errors import ShoalError, SpecError, StoreError

pytestmark = pytest.mark.faults

SECRET = "hf_do-not-print-me-4242"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    root = tmp_path / "store"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("inside")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("outside")
    (root / "link").symlink_to(outside)  # a folder link planted in the store
    (root / "sub" / "file-link").symlink_to(outside / "victim.txt")
    monkeypatch.setenv("SHOAL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHOAL_STORE", root.as_uri())
    return open_store(root.as_uri())


# --- store keys and File/Dir paths ------------------------------------------------------------

@pytest.mark.parametrize("key", ["sub/../sub/a.txt", "../outside/victim.txt", "/etc/passwd",
                                 "sub//a.txt", "./sub/a.txt", "link/victim.txt",
                                 "sub/file-link"])
def test_a_store_key_that_leaves_the_store_is_refused(store: Any, key: str,
                                                      tmp_path: Path) -> None:
    uri = f"{store.root}/{key}"
    with pytest.raises(ShoalError):
        store.get_bytes(uri)
    with pytest.raises(ShoalError):
        store.put_bytes(uri, b"overwritten")
    assert (tmp_path / "outside" / "victim.txt").read_text() == "outside"
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["victim.txt"]
    assert store.get_bytes(f"{store.root}/sub/a.txt") == b"inside"  # plain keys still work


def test_file_and_dir_names_cannot_leave_their_prefix(store: Any, tmp_path: Path) -> None:
    for bad in ("../x", "/etc/x", "a//b", "a/./b"):
        with pytest.raises(SpecError, match="relative path"):
            shoal.File.new_remote(bad)
        with pytest.raises(SpecError, match="relative path"):
            shoal.Dir.new_remote(bad)
    d = shoal.Dir(f"{store.root}/sub")
    with pytest.raises(SpecError):
        d.get_file_sync("../../outside/victim.txt")
    with pytest.raises(SpecError):
        shoal.File(f"{store.root}/sub/../link/victim.txt").download_sync(tmp_path / "got.txt")
    assert not (tmp_path / "got.txt").exists()


def test_a_dir_download_through_a_planted_link_is_refused(store: Any, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="symbolic link"):
        shoal.Dir(f"{store.root}/sub").download_sync(tmp_path / "dl")
    assert not (tmp_path / "dl" / "file-link").exists()


# --- archives ---------------------------------------------------------------------------------

def _tar_gz(entries: list[tarfile.TarInfo]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for info in entries:
            data = b"pwned" if info.isfile() else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("evil", [
    _entry("../escaped.py"), _entry("/tmp/shoal-absolute-escape.py"),
    _entry("pkg/../../escaped.py"), _entry("ln", tarfile.SYMTYPE, "/etc/passwd"),
    _entry("hard", tarfile.LNKTYPE, "../escaped.py"), _entry("dev", tarfile.CHRTYPE),
], ids=["dotdot", "absolute", "nested-dotdot", "symlink", "hardlink", "device"])
def test_a_code_bundle_with_an_escaping_entry_is_refused(store: Any, tmp_path: Path,
                                                         evil: tarfile.TarInfo) -> None:
    data = _tar_gz([_entry("main.py"), evil])
    digest = hashlib.sha256(data).hexdigest()  # the hash matches: only the entries are wrong
    uri = f"{store.root}/code/{digest}.tar.gz"
    store.put_bytes(uri, data)
    with pytest.raises(SpecError, match="code bundle"):
        bundle.fetch(uri, "main.py")
    code = tmp_path / "home" / "code"
    assert list(code.iterdir()) == []  # no staging folder left, nothing unpacked
    assert not (tmp_path / "home" / "escaped.py").exists()
    assert not Path("/tmp/shoal-absolute-escape.py").exists()


def test_a_packed_bundle_unpacks(store: Any, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("x = 1\n")
    b = bundle.build(tmp_path / "src" / "main.py", store.root)
    assert bundle.fetch(b.uri, b.file).read_text() == "x = 1\n"


# --- pickles ----------------------------------------------------------------------------------

class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch shoal-pickle-ran",))


def test_a_pickle_is_never_loaded_unless_the_task_allows_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    evil = {"pickle": {"b64": base64.b64encode(pickle.dumps(_Boom())).decode()}}
    for tp in (object, Any, _Boom, int):
        with pytest.raises(ShoalError):
            codecs.decode(evil, tp, blobs=None, field="input 'x'")
    assert codecs.decode(evil, dict, blobs=None, field="x") == evil  # data, never unpickled
    assert not (tmp_path / "shoal-pickle-ran").exists()
    with pytest.raises(ShoalError):
        codecs.encode(_Boom(), _Boom, blobs=None, field="output")


# --- secrets in environment variables ---------------------------------------------------------

def test_which_names_look_secret() -> None:
    for name in ("HF_TOKEN", "hf_token", "GITHUB_TOKEN_RO", "AWS_SECRET_ACCESS_KEY",
                 "DB_PASSWORD", "api_key", "WANDB_API_KEY", "TOKEN"):
        assert looks_secret(name), name
    for name in ("PATH", "TOKENIZERS_PARALLELISM", "KEYRING", "MASTER_PORT", "SHOAL_HOME"):
        assert not looks_secret(name), name
    assert redacted({"HF_TOKEN": SECRET, "A": "1"}) == {"HF_TOKEN": "<redacted>", "A": "1"}


SECRET_PROGRAM = f'''
import os
import shoal

env = shoal.TaskEnvironment("leaky", env_vars={{"HF_TOKEN": "{SECRET}", "PLAIN": "shown"}})


@env.task
def main(n: int) -> bool:
    print("task running", flush=True)
    return os.environ["HF_TOKEN"] == "{SECRET}"
'''


def _shoal(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "leaky.py"
    program.write_text(SECRET_PROGRAM)
    env = {**os.environ, "SHOAL_HOME": str(tmp_path / "home"),
           "SHOAL_STORE": (tmp_path / "store").as_uri()}
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", *args,
                           str(program), "main", "--n", "1"], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)


@pytest.mark.slow
def test_a_secret_env_var_reaches_the_task_but_no_plan_log_or_record(tmp_path: Path) -> None:
    dry = _shoal(tmp_path, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "HF_TOKEN=<redacted>" in dry.stdout and "PLAIN=shown" in dry.stdout
    assert SECRET not in dry.stdout + dry.stderr
    done = _shoal(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "true"  # the process got the real value
    assert SECRET not in done.stdout + done.stderr
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file() and not path.name.endswith((".db-wal", ".db-shm")):
            assert SECRET.encode() not in path.read_bytes(), path
    with sqlite3.connect(tmp_path / "home" / "shoal.db") as db:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f"SELECT * FROM {table}"):
                assert SECRET not in repr(row), table


def test_kubernetes_refuses_a_secret_env_var_value_and_points_at_shoal_secret() -> None:
    from tests.kubernetes.test_compile import _compile, _env_task

    task = _env_task(env_vars={"HF_TOKEN": SECRET})
    with pytest.raises(SpecError, match=r"shoal\.Secret") as e:
        _compile(task)
    assert SECRET not in str(e.value)
    manifests = _compile(_env_task(env_vars={"TOKENIZERS_PARALLELISM": "false"}))
    assert "TOKENIZERS_PARALLELISM" in repr(manifests)


def test_a_slurm_script_leaves_the_value_to_sbatchs_environment(tmp_path: Path) -> None:
    from shoal._engines.slurm.script import secret_env_vars
    from tests.unit.test_slurm_script import call, script

    env_vars = frozen_map({"HF_TOKEN": SECRET, "PLAIN": "shown"})
    text = script(tmp_path, "prepare", env_vars=env_vars)
    assert SECRET not in text and "export PLAIN=shown" in text
    assert "# HF_TOKEN: from the environment sbatch was started with" in text
    assert secret_env_vars(call("prepare", env_vars=env_vars).task.env) == {"HF_TOKEN": SECRET}


def test_a_dry_run_plan_redacts_in_process() -> None:
    from shoal._engines.local.plan import plan_process
    from shoal._engines.local.pool import Request
    from tests.unit.test_local_plan import WENV

    env = shoal.TaskEnvironment("p-secret", env_vars={"DB_PASSWORD": SECRET, "X_KEY": SECRET})
    plan = plan_process(env.spec(), capacity=Request(2, 2**34, 0), wenv=WENV, base={},
                        priorities={})
    assert plan.environ["DB_PASSWORD"] == SECRET  # the process gets it
    shown = plan.render(base={})
    assert SECRET not in shown and "DB_PASSWORD=<redacted>" in shown
    assert dataclasses.replace(plan, environ={}).render(base={}).count("<redacted>") == 0
