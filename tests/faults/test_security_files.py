"""What Shoal leaves on disk: its home, records, logs and metrics are its user's alone (0700
folders, 0600 files) under the common umask 022, and a code-bundle fetch that fails leaves no
staging folder behind, whichever way it fails."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal._storage import bundle, private
from shoal._storage.records import Records
from shoal._storage.store import open_store
from shoal.errors import SpecError, StoreError

pytestmark = pytest.mark.faults


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # the common default: plain mkdir/open make 0755/0644
    try:
        yield
    finally:
        os.umask(old)


# --- the home and the records -----------------------------------------------------------------

def test_a_new_home_and_its_records_are_private(tmp_path: Path) -> None:
    home = tmp_path / "a" / "home"
    records = Records(home / "shoal.db")
    run = records.create_run(task="m.main", code_file="m.py", engine="local",
                             store=(home / "store").as_uri(), inputs={"password": "x"})
    records.set_run_state(run.name, "running")
    assert _mode(home) == 0o700
    assert _mode(tmp_path / "a") == 0o700  # a missing parent is made by Shoal too
    for name in private.HOME_FOLDERS:
        assert _mode(home / name) == 0o700, name
    db = [p for p in home.iterdir() if p.name.startswith("shoal.db")]
    assert {p.name for p in db} >= {"shoal.db", "shoal.db-wal", "shoal.db-shm"}
    for p in db:
        assert _mode(p) == 0o600, p


def test_the_default_home_made_loose_by_an_older_shoal_is_tightened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SHOAL_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    home = tmp_path / ".shoal"
    (home / "runs").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "runs", 0o755)
    (home / "shoal.db").touch(mode=0o644)
    Records(home / "shoal.db")
    assert _mode(home) == 0o700 and _mode(home / "runs") == 0o700
    assert capsys.readouterr().err == ""  # Shoal's own folder: tightened without a word


def test_a_loose_home_the_user_chose_is_left_with_a_warning_its_shoal_folders_private(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "team-folder"
    home.mkdir(mode=0o755)
    (home / "logs").mkdir()  # something of the user's: not Shoal's to change
    (home / "runs").mkdir(mode=0o755)  # Shoal's, made loose
    monkeypatch.setenv("SHOAL_HOME", str(home))
    Records(home / "shoal.db")
    err = capsys.readouterr().err
    assert f"SHOAL_HOME={home} can be read by other users (mode 755)" in err
    assert f"chmod 700 {home}" in err and err.count("\n") == 1
    assert _mode(home) == 0o755 and _mode(home / "logs") == 0o755
    assert _mode(home / "runs") == 0o700 and _mode(home / "shoal.db") == 0o600
    Records(home / "shoal.db")
    assert capsys.readouterr().err == ""  # once per process


def test_private_dir_is_exact_whatever_the_umask(tmp_path: Path) -> None:
    os.umask(0o000)
    assert _mode(private.private_dir(tmp_path / "x" / "y")) == 0o700
    assert _mode(tmp_path / "x") == 0o700
    fd = private.open_private(tmp_path / "x" / "y" / "z" / "f.log")
    os.close(fd)
    assert _mode(tmp_path / "x" / "y" / "z" / "f.log") == 0o600
    assert _mode(tmp_path / "x" / "y" / "z") == 0o700


PROGRAM = '''
import shoal

env = shoal.TaskEnvironment("files")


@env.task
def main(n: int) -> int:
    print("a line of the task's log", flush=True)
    shoal.log_metrics({"loss": 1.0 / n}, step=1)
    return n + 1
'''


@pytest.mark.slow
def test_a_real_runs_records_logs_and_metrics_are_private(tmp_path: Path) -> None:
    program = tmp_path / "files_prog.py"
    program.write_text(PROGRAM)
    home = tmp_path / "home"
    env = {**os.environ, "SHOAL_HOME": str(home)}
    env.pop("SHOAL_STORE", None)  # the default store: under the home
    done = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", str(program), "main",
                           "--n", "2"], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path, preexec_fn=lambda: os.umask(0o022))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "3"
    assert _mode(home) == 0o700
    for name in ("runs", "store"):
        assert _mode(home / name) == 0o700, name
    logs = list(home.rglob("*.log"))
    metrics = list(home.rglob("*.jsonl"))
    assert logs and metrics, sorted(str(p) for p in home.rglob("*"))
    assert any("a line of the task's log" in p.read_text() for p in logs)
    for p in [*logs, *metrics, *home.glob("shoal.db*")]:
        assert _mode(p) == 0o600, p
    # Whatever else lies in the home, no other user can reach it: every path under the home
    # passes through the home itself (0700), and Shoal's folders in it are 0700 as well.
    for p in home.rglob("*"):
        top = home / p.relative_to(home).parts[0]
        assert top.is_file() or _mode(top) == 0o700, top


# --- code-bundle staging folders --------------------------------------------------------------

def _tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SHOAL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHOAL_STORE", (tmp_path / "store").as_uri())
    return open_store((tmp_path / "store").as_uri())


def _put(store: Any, files: dict[str, bytes]) -> str:
    data = _tar_gz(files)
    uri = f"{store.root}/code/{hashlib.sha256(data).hexdigest()}.tar.gz"
    store.put_bytes(uri, data)
    return uri


def _left(tmp_path: Path) -> list[str]:
    code = tmp_path / "home" / "code"
    return sorted(p.name for p in code.iterdir()) if code.exists() else []


FILES = {"main.py": b"x = 1\n", "pkg/util.py": b"y = 2\n"}


def test_a_fetched_bundle_leaves_only_its_folder(store: Any, tmp_path: Path) -> None:
    uri = _put(store, FILES)
    digest = uri.rsplit("/", 1)[-1].split(".")[0]
    assert bundle.fetch(uri, "main.py").read_text() == "x = 1\n"
    assert _left(tmp_path) == [digest]
    assert _mode(tmp_path / "home" / "code") == 0o700
    assert _mode(tmp_path / "home" / "code" / digest) == 0o700
    assert bundle.fetch(uri, "main.py").exists() and _left(tmp_path) == [digest]


def test_a_missing_bundle_leaves_no_staging_folder(store: Any, tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        bundle.fetch(f"{store.root}/code/{'0' * 64}.tar.gz", "main.py")
    assert _left(tmp_path) == []


def test_a_bundle_not_matching_its_hash_leaves_no_staging_folder(store: Any,
                                                                 tmp_path: Path) -> None:
    uri = f"{store.root}/code/{'a' * 64}.tar.gz"
    store.put_bytes(uri, _tar_gz(FILES))
    with pytest.raises(SpecError, match="content hash"):
        bundle.fetch(uri, "main.py")
    assert _left(tmp_path) == []


def test_a_bundle_with_a_bad_entry_leaves_no_staging_folder(store: Any, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="leaves its folder"):
        bundle.fetch(_put(store, {"main.py": b"", "../evil.py": b""}), "main.py")
    assert _left(tmp_path) == []


def test_a_damaged_archive_leaves_no_staging_folder(store: Any, tmp_path: Path) -> None:
    data = _tar_gz(FILES)[:-40]  # cut: gzip's end is missing
    uri = f"{store.root}/code/{hashlib.sha256(data).hexdigest()}.tar.gz"
    store.put_bytes(uri, data)
    with pytest.raises((tarfile.TarError, EOFError, OSError)):
        bundle.fetch(uri, "main.py")
    assert _left(tmp_path) == []


@pytest.mark.parametrize("raised", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk-full", "ctrl-c"])
def test_an_interruption_mid_extract_leaves_no_staging_folder(
        store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        raised: BaseException) -> None:
    uri = _put(store, FILES)
    real = tarfile.TarFile.extract
    seen: list[str] = []

    def extract_one_then_fail(self: tarfile.TarFile, member: Any, *a: Any, **k: Any) -> None:
        if seen:
            raise raised  # the first file is on disk, the second never comes
        seen.append(str(member))
        real(self, member, *a, **k)

    def extractall(self: tarfile.TarFile, path: Any, members: Any = None,
                   **k: Any) -> None:
        for m in members or self.getmembers():
            extract_one_then_fail(self, m, path, **k)

    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall)
    with pytest.raises(type(raised)):
        bundle.fetch(uri, "main.py")
    assert seen and _left(tmp_path) == []


def test_a_failure_writing_the_marker_leaves_no_staging_folder(
        store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _put(store, FILES)

    def full(self: Path, *a: Any, **k: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match="No space"):
        bundle.fetch(uri, "main.py")
    assert _left(tmp_path) == []


def test_a_bundle_another_process_unpacked_first_leaves_one_folder(
        store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _put(store, FILES)
    digest = uri.rsplit("/", 1)[-1].split(".")[0]
    real = store.get_bytes

    def racing(u: str) -> bytes:  # the other process finishes while this one downloads
        (tmp_path / "home" / "code" / digest).mkdir()
        (tmp_path / "home" / "code" / digest / "main.py").write_text("x = 1\n")
        return bytes(real(u))

    monkeypatch.setattr(bundle, "store_for", lambda u: type("S", (), {"get_bytes":
                                                                      staticmethod(racing)}))
    assert bundle.fetch(uri, "main.py").read_text() == "x = 1\n"
    assert _left(tmp_path) == [digest]
