"""The image builders without running one: which builder is chosen and what a missing one says,
the host's pip settings and CA bundle as a build gets them, the build's own Dockerfile, the
Debian base's checks, and the dependencies a copied Shoal installs. Real builds:
tests/containers."""

from __future__ import annotations

from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._api.image.script import toml_module
from shoal._api.image.shoal_package import (
    runtime_requirements,
    shoal_install_lines,
    shoal_source,
)
from shoal._engines.images import (
    check_builder,
    check_suite_python,
    find_builder,
    host_build_config,
    names_registry,
    resolved_ref,
    runtime_hint,
)
from shoal._engines.images import host_config as host
from shoal._engines.images.debian_base import mmdebstrap_argv
from shoal.cli.main import main
from shoal.errors import EngineError, SpecError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_system_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose pip files and CA bundle are the test's alone."""
    monkeypatch.setattr(host, "SYSTEM_PIP_CONF", tmp_path / "none" / "pip.conf")
    monkeypatch.setattr(host, "DEBIAN_CA_BUNDLE", tmp_path / "none" / "ca.crt")
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "xdg")}


def test_the_hosts_pip_settings_reach_the_build_as_pip_does_less_what_it_cannot_see(
        tmp_path: Path, no_system_pip: dict[str, str]) -> None:
    ca = tmp_path / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    user = tmp_path / "home" / ".config" / "pip" / "pip.conf"
    user.parent.mkdir(parents=True)
    user.write_text("[global]\nindex-url = https://user.example/simple\n"
                    "find-links = /opt/wheels\n")
    named = tmp_path / "named.conf"
    named.write_text(f"[global]\nindex_url = https://idx.example/simple\n"
                     "extra-index-url = file:///opt/pypi https://extra.example/simple\n"
                     f"cert = {ca}\nclient-cert = /home/me/key.pem\n"
                     "[install]\ntrusted-host = idx.example\nextra-index-url = "
                     "https://install.example/simple\n")
    env = {**no_system_pip, "PIP_CONFIG_FILE": str(named),
           "PIP_EXTRA_INDEX_URL": "https://env.example/simple"}
    got = host_build_config(env)
    # The named file wins over the user's; the variable over every file, in every section;
    # local paths, file:// URLs and the client key are left out; cert is the build's secret.
    assert got.pip_conf == ("[global]\ncert = /run/secrets/shoal-ca.crt\n"
                            "extra-index-url = https://env.example/simple\n"
                            "index-url = https://idx.example/simple\n"
                            "[install]\ntrusted-host = idx.example\n")
    assert got.ca_bundle == ca
    assert set(got.sources) == {str(user), str(named), "PIP_EXTRA_INDEX_URL",
                                f"CA bundle {ca} (pip.conf cert)"}
    assert got.build_args == {"PIP_CONFIG_FILE": "/run/secrets/shoal-pip.conf",
                              "SSL_CERT_FILE": "/run/secrets/shoal-ca.crt",
                              "REQUESTS_CA_BUNDLE": "/run/secrets/shoal-ca.crt"}
    secrets = got.secrets(tmp_path)
    assert secrets[host.PIP_SECRET].read_text() == got.pip_conf
    assert secrets[host.CA_SECRET].read_bytes() == ca.read_bytes()
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in secrets.values())

    other = tmp_path / "other.pem"
    other.write_text("x")
    assert host_build_config({**env, "PIP_CERT": str(other)}).ca_bundle == other
    devnull = host_build_config({**no_system_pip, "PIP_CONFIG_FILE": "/dev/null"})
    assert devnull == host.HostBuildConfig()  # pip reads no file; no CA anywhere here


def test_the_builds_dockerfile_mounts_the_secrets_in_every_run_and_nothing_else_changes(
) -> None:
    rendered = ("# Rendered by Shoal\nFROM python:3.11-slim-bookworm\nWORKDIR /root\n"
                "RUN apt-get update && \\\n    RUN_ME=1 apt-get install -y git\n"
                "# RUN in a comment\nrun [\"python\", \"-V\"]\nCOPY [\"a\", \"/a\"]\n")
    ids = [host.PIP_SECRET, host.CA_SECRET]
    out = host.build_dockerfile(rendered, ids, ["PIP_CONFIG_FILE"]).splitlines()
    mounts = "--mount=type=secret,id=shoal-pip.conf --mount=type=secret,id=shoal-ca.crt"
    assert out == ["# Rendered by Shoal", "FROM python:3.11-slim-bookworm",
                   "ARG PIP_CONFIG_FILE", "WORKDIR /root",
                   f"RUN {mounts} apt-get update && \\", "    RUN_ME=1 apt-get install -y git",
                   "# RUN in a comment", f"run {mounts} [\"python\", \"-V\"]",
                   "COPY [\"a\", \"/a\"]"]
    assert host.build_dockerfile(rendered, [], []) == rendered
    image = shoal.Image.from_debian_base("3.11").with_pip_packages("six")
    tag = image.tag
    host.build_dockerfile(image.dockerfile(), ids, ["PIP_CONFIG_FILE"])
    assert image.tag == tag  # the tag hashes the rendered Dockerfile only


def test_a_builder_is_chosen_by_name_and_a_missing_one_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecError, match="did you mean 'podman'") as bad:
        check_builder("--builder", "podmn")
    assert bad.value.field == "--builder" and "docker, podman, buildah" in bad.value.rule
    with pytest.raises(SpecError, match="use one of docker, podman, buildah"):
        check_builder("--builder", "kaniko")
    monkeypatch.setenv("PATH", str(tmp_path))  # no builder at all
    with pytest.raises(EngineError) as none:
        find_builder()
    for words in ("docker: no `docker` command", "podman: no `podman`", "buildah: no",
                  "Fix: install podman (apt-get install podman runc)"):
        assert words in str(none.value)
    with pytest.raises(EngineError, match=r"buildah image builder cannot be used.*Fix: "
                       r"install buildah \(apt-get install buildah runc\)"):
        find_builder("buildah")
    monkeypatch.setenv(contract.IMAGE_BUILDER, "podmn")
    with pytest.raises(SpecError, match=r"SHOAL_IMAGE_BUILDER='podmn'.*did you mean"):
        find_builder()
    monkeypatch.delenv(contract.IMAGE_BUILDER)
    with pytest.raises(SpecError, match=r"image\.builder='buildahh'"):
        find_builder(configured="buildahh")  # the config file's, when nothing else names one


def test_the_cli_refuses_a_bad_builder_and_a_push_with_nowhere_to_go(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "pipeline.py"
    program.write_text("import shoal\nenv = shoal.TaskEnvironment(name='e', image="
                       "shoal.Image.from_debian_base('3.11').with_pip_packages('six'))\n")
    assert main(["image", "build", str(program), "--builder", "podmn"]) == 2
    assert "--builder='podmn': must be one of docker, podman, buildah. Fix: did you mean " \
           "'podman'?" in capsys.readouterr().err
    assert main(["image", "build", str(program), "--push", "--out", str(tmp_path)]) == 2
    assert "--push=True: the image of 'e' names no registry" in capsys.readouterr().err
    assert main(["image", "base", "--python", "3.12"]) == 2
    assert "Debian bookworm carries Python 3.11 only" in capsys.readouterr().err


def test_the_debian_base_is_checked_and_named_as_its_from_resolves() -> None:
    check_suite_python("3.11", "bookworm")
    check_suite_python("3.13", "trixie")
    with pytest.raises(SpecError, match=r"use --suite trixie, which carries Python 3\.13"):
        check_suite_python("3.13", "bookworm")
    with pytest.raises(SpecError, match=r"use --python 3\.11, or build FROM python:3\.12-slim"):
        check_suite_python("3.12", "bookworm")
    with pytest.raises(SpecError, match=r"--suite='sid'.*bookworm \(Python 3.11\)"):
        check_suite_python("3.11", "sid")
    assert resolved_ref("python:3.11-slim-bookworm") == \
        "docker.io/library/python:3.11-slim-bookworm"
    assert resolved_ref("org/img:1") == "docker.io/org/img:1"
    assert resolved_ref("localhost:5000/img:1") == "localhost:5000/img:1"
    assert [names_registry(r) for r in ("shoal:1", "org/img:1", "ghcr.io/o/i:1",
                                        "localhost/i:1", "127.0.0.1:9/i:1")] == \
        [False, False, True, True, True]
    argv = mmdebstrap_argv("bookworm", Path("/t/b.tar"))
    assert argv[:3] == ["mmdebstrap", "--variant=minbase", "--format=tar"]
    assert "--include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates" \
        in argv
    assert any("EXTERNALLY-MANAGED" in a for a in argv) and argv[-2:] == ["bookworm",
                                                                        "/t/b.tar"]


def test_a_copied_shoal_installs_what_its_pyproject_lists(tmp_path: Path) -> None:
    """The list comes from pyproject.toml (so `packaging` is there), or from the installed
    metadata where the package has no source tree around it."""
    project = toml_module("pyproject.toml").loads((ROOT / "pyproject.toml").read_text())[
        "project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["s3"]]
    got = runtime_requirements()
    assert got == list(dict.fromkeys(wanted)) and any(r.startswith("packaging") for r in got)
    installed = runtime_requirements(tmp_path / "site-packages" / "shoal")  # no pyproject
    assert {r.split(">")[0] for r in installed} >= {"packaging", "psutil", "obstore"}
    assert not any("extra" in r for r in installed)
    if shoal_source() is not None:  # this Shoal is copied in: its dependencies are installed
        assert "'packaging>=22'" in "\n".join(shoal_install_lines())


def test_known_container_stack_failures_say_what_to_change() -> None:
    """Output this kind of machine gives (runc's, from `podman run` without the ulimits;
    crun's cgroup failure), and a failure nobody knows, which gets no made-up fix."""
    rlimit = ("Error: runc: runc create failed: unable to start container process: error "
              "during container init: error setting rlimits for ready process: error setting "
              "rlimit type 7: operation not permitted: OCI permission denied")
    assert "default_ulimits" in runtime_hint(rlimit) and "CONTAINERS_CONF" in \
        runtime_hint(rlimit)
    crun = "Error: OCI runtime error: crun: create `/sys/fs/cgroup/...`: Read-only file system"
    assert 'runtime = "runc"' in runtime_hint(crun)
    missing = 'Error: default OCI runtime "crun" not found: invalid argument'  # podman 4.3's
    assert "apt-get install crun" in runtime_hint(missing)
    assert runtime_hint("Error: no space left on device") == ""
