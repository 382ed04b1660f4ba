"""Real image builds: podman, buildah and podman behind a `docker` name build a user's image on
the Debian base made from the mirror; a rebuild is a cache hit; the host's pip settings and
CA bundle reach the build but no layer; a user file that calls `with_pip_packages` at import
imports inside its image (Shoal's runtime dependencies, `packaging` among them, are there)."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shoal.errors import EngineError
from tests.containers.conftest import PYTHON, Storage

pytestmark = [pytest.mark.slow, pytest.mark.containers]

# A user's pipeline file: its image has a pip package and a file only the image holds; run
# as a program inside the image it reports what it sees. Building its Image at import calls
# with_pip_packages, which needs `packaging` wherever it runs.
PIPELINE = '''
import json, sys
from pathlib import Path

import shoal

HERE = Path(__file__).parent
image = (shoal.Image.from_debian_base()
         .with_pip_packages("six")
         .with_source_file(HERE / "marker.txt", "/app")
         .with_source_file(HERE / "pipeline.py", "/app"))
env = shoal.TaskEnvironment(name="six-env", image=image)
twin = shoal.TaskEnvironment(name="six-twin", image=image)  # the same image: built once

if __name__ == "__main__":
    import six
    print(json.dumps({"six": six.__version__, "marker": (HERE / "marker.txt").read_text(),
                      "python": list(sys.version_info[:2]), "executable": sys.executable}))
'''


def _project(folder: Path, text: str = PIPELINE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "marker.txt").write_text("only in the image\n")
    (folder / "pipeline.py").write_text(text)
    return folder / "pipeline.py"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from shoal.cli.main import main

    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _layer_dirs(storage: Storage, ref: str, base: str) -> list[Path]:
    """The layer folders of ``ref`` that its base does not have."""
    def dirs(name: str) -> list[str]:
        out = storage.podman("image", "inspect", "--format",
                             "{{.GraphDriver.Data.UpperDir}}:{{.GraphDriver.Data.LowerDir}}",
                             name).stdout.strip()
        return [d for d in out.split(":") if d and d != "<no value>"]

    own = [Path(d) for d in dirs(ref) if d not in set(dirs(base))]
    assert own and all(d.is_dir() for d in own), own
    return own


def test_the_base_comes_from_the_mirror_and_from_finds_it_without_a_registry(
        debian_base: str, container_storage: Storage) -> None:
    """`python:3.11-slim-bookworm`, as a Dockerfile's FROM names it, is the imported base
    (no registry is reachable here): Debian's Python, pip and venv, no PEP 668 marker."""
    probe = ("import sys, pip, venv, ssl, sysconfig, os, json; print(json.dumps([list("
             "sys.version_info[:2]), sys.executable, os.path.exists(sysconfig.get_path("
             "'stdlib') + '/EXTERNALLY-MANAGED')]))")
    short = debian_base.removeprefix("docker.io/library/")
    run = container_storage.podman("run", "--rm", "--pull=never", short, "python", "-c", probe)
    assert run.returncode == 0, run.stderr
    version, executable, managed = json.loads(run.stdout)
    assert version == [int(p) for p in PYTHON.split(".")] and executable == "/usr/bin/python"
    assert managed is False


def test_podman_builds_a_users_image_once_and_keeps_the_hosts_pip_settings_out_of_it(
        debian_base: str, container_storage: Storage, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`shoal image build --builder podman`: six from PyPI (through the host's CA bundle,
    which pip here needs), a file only the image has, the user's file importable inside it
    (the packaging fix); the twin environment's identical image is not built again, nor is
    either on a second run; the host's pip settings are in no layer, history or config."""
    sentinel = f"shoal-sentinel-{uuid.uuid4().hex[:12]}"
    pip_conf = tmp_path / "host-pip.conf"
    pip_conf.write_text(f"[global]\ntrusted-host = {sentinel}\n"
                        "find-links = /host/only/wheels\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_conf))
    monkeypatch.setenv("PIP_INDEX_URL", "https://pypi.org/simple")
    pipeline = _project(tmp_path / "project")
    out = tmp_path / "images"

    code, said = _cli(capsys, "image", "build", str(pipeline), "--builder", "podman",
                      "--out", str(out))
    assert code == 0, said
    built = re.findall(r"^six-env: (\S+) built by podman in", said, re.M)
    assert len(built) == 1 and re.search(rf"^six-twin: {re.escape(built[0])} cached", said,
                                         re.M), said
    ref = built[0]

    run = container_storage.podman("run", "--rm", ref, "python", "/app/pipeline.py")
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert seen["six"] and seen["marker"] == "only in the image\n"
    assert seen["python"] == [int(p) for p in PYTHON.split(".")]
    assert seen["executable"] == "/usr/bin/python"  # the image's Python, not this one

    log = (out / "six-env.build.log").read_text()
    # The log names where the host's settings came from, never their values.
    assert str(pip_conf) in log and "PIP_INDEX_URL" in log and sentinel not in log
    history = container_storage.podman("history", "--no-trunc", "--format",
                                       "{{.CreatedBy}}", ref).stdout
    config = container_storage.podman("image", "inspect", ref).stdout
    assert "pip install" in history and "/run/secrets/shoal-pip.conf" in history
    assert sentinel not in history and sentinel not in config
    assert "PIP_CONFIG_FILE" not in json.loads(config)[0]["Config"].get("Env", [])
    scanned = set()
    for layer in _layer_dirs(container_storage, ref, debian_base):
        for path in layer.rglob("*"):
            assert path.name not in ("shoal-pip.conf", "shoal-ca.crt"), path
            if path.is_file() and not path.is_symlink():
                assert sentinel.encode() not in path.read_bytes(), path
                scanned.add(path.name)
    assert {"six.py", "marker.txt", "pipeline.py"} <= scanned  # the scan saw the layers' files

    started = time.monotonic()
    code, said = _cli(capsys, "image", "build", str(pipeline), "--out", str(out))
    took = time.monotonic() - started
    assert code == 0 and said.count(f"{ref} cached") == 2, said
    assert took < 10, took


def test_buildah_builds_pushes_to_the_registry_named_and_says_where_the_push_failed(
        debian_base: str, container_storage: Storage, tmp_path: Path) -> None:
    """buildah through the Python API: built once for two callers at once, then cached;
    with a registry the image is pushed, and a registry that does not answer is an
    EngineError naming the ref and log."""
    import shoal
    from shoal._engines.images import find_builder

    _project(tmp_path)
    image = (shoal.Image.from_debian_base(install_shoal=False).with_pip_packages("six")
             .with_source_file(tmp_path / "marker.txt", "/app"))
    builder = find_builder("buildah")
    log = tmp_path / "build.log"
    # Two environments asking at once: one builds, the other waits and finds it built.
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: builder.ensure(image, log=log), range(2)))
    assert sorted(b.built for b in both) == [False, True], both
    first = next(b for b in both if b.built)
    assert not first.pushed and first.ref == image.uri()
    assert len(re.findall(r"^== shoal: buildah build of \S+: exit 0", log.read_text(),
                          re.M)) == 1
    again = builder.ensure(image, log=log)
    assert not again.built and again.seconds == 0.0
    run = container_storage.podman("run", "--rm", first.ref, "python", "-c",
                                   "import six; print(open('/app/marker.txt').read())")
    assert run.returncode == 0 and run.stdout == "only in the image\n\n", run.stderr

    with pytest.raises(EngineError) as failed:
        builder.build(image, log=log, registry="127.0.0.1:9")
    message = str(failed.value)
    assert f"buildah push of 127.0.0.1:9/{image.uri()}" in message and str(log) in message
    assert builder.exists(f"127.0.0.1:9/{image.uri()}")  # built (from cached layers) first


def test_a_docker_that_is_podman_is_found_and_builds(
        debian_base: str, container_storage: Storage, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A `docker` with no engine behind it is passed over for podman, and named when asked
    for; a `docker` that execs podman is found first and `shoal image build` goes through it
    (podman answers `docker version --format {{.Server.Version}}`, not `docker info`'s)."""
    from shoal._engines.images import find_builder

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at "
                      "unix:///var/run/docker.sock.' >&2\nexit 1\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert find_builder().name == "podman"
    with pytest.raises(EngineError, match=r"Cannot connect to the Docker daemon.*Fix: install "
                       r"Docker"):
        find_builder("docker")

    docker.write_text('#!/bin/sh\nexec podman "$@"\n')
    pipeline = _project(tmp_path / "project", PIPELINE.replace(
        "shoal.Image.from_debian_base()", "shoal.Image.from_debian_base(install_shoal=False)")
        .replace('.with_pip_packages("six")', '.with_pip_packages("six")'
                 '.with_commands("echo built-by-docker > /built-by")'))
    code, said = _cli(capsys, "image", "build", str(pipeline), "--env", "six-env", "--out",
                      str(tmp_path / "images"))
    assert code == 0 and "built by docker" in said, said
    ref = said.split()[1]
    run = container_storage.podman("run", "--rm", ref, "cat", "/built-by")
    assert run.stdout == "built-by-docker\n", run.stderr
