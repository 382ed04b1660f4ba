"""init_from_config's file: where it is found, what it may hold, what each bad value says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._driver import config, handle
from shoal.errors import SpecError


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the working directory and an empty user home."""
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "user").mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for name in (contract.CONFIG, *config.FLYTE_CONFIG_VARS, contract.UI_URL,
                 contract.IMAGE_REGISTRY, contract.IMAGE_BUILDER, contract.ENGINE,
                 contract.LOG_LEVEL):
        monkeypatch.setenv(name, "")  # so that what init_from_config sets is undone
        monkeypatch.delenv(name)
    monkeypatch.setattr(handle, "DEFAULT_LABELS", {})
    return project


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_nothing_found_means_none(places: Path) -> None:
    assert config.find(None) is None


def test_search_order(places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = Path(os.environ["HOME"])
    flyte_home = write(user / ".flyte" / "config.yaml", "task: {project: p}\n")
    assert config.find(None) == flyte_home
    union = write(user / ".union" / "config.yaml", "{}\n")
    assert config.find(None) == union
    flytectl = write(places / "elsewhere.yaml", "{}\n")
    monkeypatch.setenv("FLYTECTL_CONFIG", str(flytectl))
    assert config.find(None) == flytectl
    dot_flyte = write(places / ".flyte" / "config.yaml", "{}\n")
    assert config.find(None) == dot_flyte
    shoal_home = write(contract.home() / "config.yaml", "{}\n")
    assert config.find(None) == shoal_home
    dot_shoal = write(places / ".shoal" / "config.yaml", "{}\n")
    assert config.find(None) == dot_shoal
    named = write(places / "named.yaml", "{}\n")
    monkeypatch.setenv(contract.CONFIG, str(named))
    assert config.find(None) == named
    assert config.find(str(flyte_home)) == flyte_home  # an explicit path beats everything


def test_a_bare_config_yaml_is_not_guessed(places: Path) -> None:
    write(places / "config.yaml", "learning_rate: 0.1\n")
    assert config.find(None) is None


def test_git_root_is_searched(places: Path) -> None:
    (places / ".git").mkdir()
    sub = places / "src" / "pkg"
    sub.mkdir(parents=True)
    found = write(places / ".shoal" / "config.yaml", "{}\n")
    assert config.find(None, sub) == found


def test_missing_files_are_errors(places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecError, match="no such file"):
        config.find("nope.yaml")
    monkeypatch.setenv(contract.CONFIG, str(places / "gone.yaml"))
    with pytest.raises(SpecError, match="SHOAL_CONFIG"):
        config.find(None)


def test_shoal_settings(places: Path) -> None:
    path = write(places / ".shoal" / "config.yaml",
                 "engine: local\nstore: ./data\nhome: state\nui_url: http://h:9/\n"
                 "image: {registry: ghcr.io/me, builder: local}\n")
    s = config.load(path)
    assert s.engine == "local"
    assert s.store == (places / ".shoal" / "data").resolve().as_uri()
    assert s.home == str(places / ".shoal" / "state")
    assert s.ui_url == "http://h:9"
    assert s.image_registry == "ghcr.io/me"
    assert s.image_builder is None  # Flyte's "local": the first builder present
    assert s.notes == ()


def test_flyte_settings(places: Path) -> None:
    path = write(places / ".flyte" / "config.yaml",
                 "admin:\n  endpoint: dns:///x.example.com\n  authType: Pkce\n"
                 "console: {endpoint: https://x.example.com}\n"
                 "task: {org: o, project: flytesnacks, domain: development}\n"
                 "image: {registry: ghcr.io/org}\nlocal: {persistence: false}\n")
    s = config.load(path)
    assert dict(s.labels) == {"org": "o", "project": "flytesnacks", "domain": "development"}
    assert s.image_registry == "ghcr.io/org"
    assert len(s.notes) == 3
    assert "admin.endpoint='dns:///x.example.com'" in s.notes[0]
    assert "local engine" in s.notes[0]
    assert "shoal ui" in s.notes[1]
    assert all(str(path) in n and "\n" not in n for n in s.notes)


@pytest.mark.parametrize(("text", "key", "words"), [
    ("stroe: s3://b\n", "stroe", "did you mean 'store'"),
    ("image: {regsitry: ghcr.io/x}\n", "image.regsitry", "did you mean 'registry'"),
    ("engine: lsf\n", "engine", "the engines are local, kubernetes, slurm"),
    ("slurm_settings: ''\n", "slurm_settings", "non-empty string"),
    ("store: ftp://host/x\n", "store", "ftp://host/x"),
    ("ui_url: localhost:8484\n", "ui_url", "http://127.0.0.1:8484"),
    ("image: {registry: 'https://ghcr.io/x/'}\n", "image.registry", "ghcr.io/x"),
    ("image: {builder: remote}\n", "image.builder", "shoal image build"),
    ("image: {builder: podmn}\n", "image.builder", "did you mean 'podman'"),
    ("image: {image_refs: {a: b}}\n", "image.image_refs", "TaskEnvironment(image="),
    ("task: [1, 2]\n", "task", "must be a mapping"),
    ("home: ''\n", "home", "non-empty string"),
])
def test_bad_values_name_file_key_value_and_fix(places: Path, text: str, key: str,
                                                words: str) -> None:
    path = write(places / "c.yaml", text)
    with pytest.raises(SpecError) as err:
        config.load(path)
    assert err.value.field == f"{path}: {key}"
    assert err.value.fix
    assert words in str(err.value)


def test_unreadable_yaml(places: Path) -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        config.load(write(places / "c.yaml", "store: [unclosed\n"))
    with pytest.raises(SpecError, match="mapping of settings"):
        config.load(write(places / "c.yaml", "- a\n- b\n"))
    assert config.load(write(places / "c.yaml", "")).engine == "local"


def test_init_from_config_with_no_file_is_silent(places: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shoal.init_from_config()
    assert os.environ[contract.ENGINE] == "local"
    assert capsys.readouterr() == ("", "")
    assert handle.DEFAULT_LABELS == {}


def test_init_from_config_applies_a_file(places: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (contract.HOME, contract.STORE):
        monkeypatch.setenv(name, os.environ[name])  # restored after the test
    write(places / ".flyte" / "config.yaml", "admin: {endpoint: 'dns:///x'}\n"
          "task: {project: p}\nimage: {registry: ghcr.io/org}\n")
    shoal.init_from_config(domain="dev")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("shoal: warning: ")
    assert handle.DEFAULT_LABELS == {"project": "p", "domain": "dev"}
    assert os.environ[contract.IMAGE_REGISTRY] == "ghcr.io/org"
    image = shoal.Image.from_debian_base(python_version="3.11").with_pip_packages("six")
    assert image.uri().startswith("ghcr.io/org/")
    assert image.uri("quay.io/other").startswith("quay.io/other/")


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"batch_size": 10}, "batch_size"),
    ({"image_builder": "remote"}, "shoal image build"),
    ({"images": ("a=b",)}, "TaskEnvironment(image="),
    ({"log_format": "json"}, "log_format"),
    ({"storage": object()}, "store URI"),
    ({"path_or_config": 3}, "path of a config file"),
])
def test_init_from_config_refuses_what_shoal_cannot_do(places: Path, kwargs: dict[str, object],
                                                       words: str) -> None:
    with pytest.raises(SpecError, match="Fix:") as err:
        shoal.init_from_config(**kwargs)  # type: ignore[arg-type]
    assert words in str(err.value)


def test_the_image_builder_is_chosen_by_the_file_and_by_init_from_config(
        places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (contract.HOME, contract.STORE):
        monkeypatch.setenv(name, os.environ[name])  # restored after the test
    write(places / ".shoal" / "config.yaml", "image: {builder: buildah}\n")
    assert config.configured_image_builder() == "buildah"  # what `shoal image build` reads
    shoal.init_from_config()
    assert os.environ[contract.IMAGE_BUILDER] == "buildah"
    shoal.init_from_config(image_builder="podman")  # the argument wins over the file
    assert os.environ[contract.IMAGE_BUILDER] == "podman"
    with pytest.raises(SpecError, match="did you mean 'docker'"):
        shoal.init_from_config(image_builder="dokcer")
