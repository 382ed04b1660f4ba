"""`Image`: an immutable builder, a deterministic Dockerfile, a content-hash tag that follows
every referenced local file, and the declared packages the local engine checks for."""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from shoal._api.image.image import (
    CONTEXT_DIR,
    DEBIAN_BASE_IMAGE,
    DEFAULT_IMAGE_NAME,
    TAG_LENGTH,
    Image,
    missing_locally,
)
from shoal._api.image.shoal_package import (
    SHOAL_SOURCE_CONTEXT,
    shoal_install_lines,
    shoal_requirement,
    shoal_source,
)
from shoal.errors import SpecError

SHOAL_LINE = "\n".join(shoal_install_lines())


def _project(root: Path) -> Path:
    """A small project: a requirements file, a source folder (with caches) and a script."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "requirements.txt").write_text("numpy>=1.24\n")
    pkg = root / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("WIDTH = 4\n")
    (root / "train.py").write_text("print('train')\n")
    return root


def _recipe(root: Path) -> Image:
    return (
        Image.from_debian_base("3.11")
        .with_apt_packages("git", "curl")
        .with_pip_packages("torch", "numpy>=1.24", index_url="https://download.pytorch.org/whl/cpu")
        .with_requirements(root / "requirements.txt")
        .with_env_vars({"B": "two words", "A": "1"})
        .with_commands("nvidia-smi || true")
        .with_workdir("/app")
        .with_source_folder(root / "src")
        .with_source_file(root / "train.py", "/opt")
    )


# --- the Dockerfile --------------------------------------------------------------------------


def test_dockerfile_golden(tmp_path: Path) -> None:
    text = _recipe(_project(tmp_path)).dockerfile()
    assert text == "\n".join([
        "# Rendered by Shoal from an Image recipe; change the recipe, not this file.",
        "FROM python:3.11-slim-bookworm",
        "WORKDIR /root",
        SHOAL_LINE,
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
        "--no-install-recommends git curl && rm -rf /var/lib/apt/lists/*",
        "RUN python -m pip install --no-cache-dir --index-url "
        "https://download.pytorch.org/whl/cpu torch 'numpy>=1.24'",
        f'COPY ["{CONTEXT_DIR}/2/requirements.txt", "/tmp/shoal/{CONTEXT_DIR}/2/requirements.txt"]',
        f"RUN python -m pip install --no-cache-dir -r /tmp/shoal/{CONTEXT_DIR}/2/requirements.txt",
        'ENV A="1" B="two words"',
        "RUN nvidia-smi || true",
        "WORKDIR /app",
        f'COPY ["{CONTEXT_DIR}/6/src", "src/"]',
        f'COPY ["{CONTEXT_DIR}/7/train.py", "/opt/train.py"]',
    ]) + "\n"


def test_dockerfile_is_deterministic(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert _recipe(root).dockerfile() == _recipe(root).dockerfile()
    assert _recipe(root).tag == _recipe(root).tag
    # Insertion order of env vars does not matter; the values do.
    a = Image.from_debian_base("3.11").with_env_vars({"X": "1", "Y": "2"})
    b = Image.from_debian_base("3.11").with_env_vars({"Y": "2", "X": "1"})
    assert a.dockerfile() == b.dockerfile() and a.tag == b.tag and a == b


def test_default_python_is_the_running_one() -> None:
    image = Image.from_debian_base()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert image.python_version == version
    assert image.base_image == DEBIAN_BASE_IMAGE.format(python_version=version)
    assert Image.from_debian_base((3, 12)).python_version == "3.12"  # Flyte 2's spelling


def test_env_values_are_taken_literally() -> None:
    image = Image.from_debian_base("3.11").with_env_vars({"P": 'a "$HOME" \\ b'})
    assert 'ENV P="a \\"\\$HOME\\" \\\\ b"' in image.dockerfile()


def test_pip_options_and_commands_list() -> None:
    image = (
        Image.from_base("nvcr.io/nvidia/pytorch:24.05-py3")
        .with_pip_packages("flash-attn", pre=True, extra_index_urls="https://a.example/simple")
        .with_commands(["echo one", "echo two"], "echo three")
    )
    text = image.dockerfile()
    assert "--extra-index-url https://a.example/simple --pre flash-attn" in text
    assert "RUN echo one\nRUN echo two\nRUN echo three\n" in text
    assert "WORKDIR" not in text  # from_base keeps the base's working directory


def test_source_folder_contents_only(tmp_path: Path) -> None:
    root = _project(tmp_path)
    image = Image.from_debian_base("3.11").with_source_folder(
        root / "src", "/code", copy_contents_only=True
    )
    assert f'COPY ["{CONTEXT_DIR}/0/src", "/code/"]' in image.dockerfile()


def test_install_shoal_can_be_left_out() -> None:
    image = Image.from_debian_base("3.11", install_shoal=False)
    assert "pip install" not in image.dockerfile()
    plain = Image.from_base("ghcr.io/org/trainer:1.2", install_shoal=False)
    assert not plain.needs_build
    assert plain.uri() == "ghcr.io/org/trainer:1.2"
    assert plain.with_pip_packages("rich").needs_build


# --- immutability ----------------------------------------------------------------------------


def test_builder_returns_new_images_and_leaves_the_original(tmp_path: Path) -> None:
    base = Image.from_debian_base("3.11")
    before = base.dockerfile()
    torch = base.with_pip_packages("torch")
    jax = base.with_pip_packages("jax")
    assert torch is not base and jax is not base
    assert base.dockerfile() == before
    assert base.layers == ()
    assert "torch" in torch.dockerfile() and "torch" not in jax.dockerfile()
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.name = "other"  # type: ignore[misc]
    assert isinstance(base.layers, tuple)
    assert hash(torch) != hash(jax)
    assert pickle.loads(pickle.dumps(torch)) == torch


def test_relative_paths_are_fixed_when_the_image_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "proj")
    monkeypatch.chdir(root)
    image = Image.from_debian_base("3.11").with_requirements("requirements.txt")
    tag = image.tag
    monkeypatch.chdir(tmp_path)
    assert image.tag == tag
    sources = image.context_sources()
    sources.pop(SHOAL_SOURCE_CONTEXT, None)  # Shoal itself, when it runs from a source tree
    assert sources == {f"{CONTEXT_DIR}/0/requirements.txt": root / "requirements.txt"}


def test_shoal_itself_goes_into_the_image() -> None:
    """A Shoal not installed from an index (a source tree, an editable install) is copied into
    the build context and put on PYTHONPATH; otherwise pip installs the same version."""
    image = Image.from_debian_base("3.11")
    if shoal_source() is None:
        assert shoal_requirement() in image.dockerfile()
    else:
        assert image.context_sources()[SHOAL_SOURCE_CONTEXT] == shoal_source()
        assert "ENV PYTHONPATH=/opt/shoal" in image.dockerfile()
    assert "shoal" not in Image.from_base("x/y:1", install_shoal=False).dockerfile()


# --- the tag ---------------------------------------------------------------------------------


def test_tag_and_uri(tmp_path: Path) -> None:
    image = _recipe(_project(tmp_path))
    tag = image.tag
    assert len(tag) == TAG_LENGTH and all(c in "0123456789abcdef" for c in tag)
    assert image.uri() == f"{DEFAULT_IMAGE_NAME}:{tag}"
    assert image.uri("ghcr.io/org") == f"ghcr.io/org/{DEFAULT_IMAGE_NAME}:{tag}"
    named = Image.from_debian_base("3.11", name="team/pretrain", registry="localhost:5000")
    assert named.uri() == f"localhost:5000/team/pretrain:{named.tag}"
    assert named.uri("ghcr.io/x") == f"ghcr.io/x/team/pretrain:{named.tag}"


def test_tag_does_not_depend_on_where_the_project_lives(tmp_path: Path) -> None:
    assert _recipe(_project(tmp_path / "a")).tag == _recipe(_project(tmp_path / "b")).tag


def test_tag_changes_with_the_recipe() -> None:
    base = Image.from_debian_base("3.11")
    tags = {
        base.tag,
        Image.from_debian_base("3.12").tag,
        base.with_pip_packages("torch").tag,
        base.with_pip_packages("torch==2.3").tag,
        base.with_apt_packages("git").tag,
        base.with_env_vars({"A": "1"}).tag,
        base.with_env_vars({"A": "2"}).tag,
    }
    assert len(tags) == 7


@pytest.mark.parametrize(
    "change",
    [
        "edit requirements",
        "edit a source file",
        "add a source file",
        "rename a source file",
        "add an empty folder",
        "make a file executable",
        "edit the single file",
    ],
)
def test_tag_changes_when_a_referenced_file_changes(tmp_path: Path, change: str) -> None:
    root = _project(tmp_path)
    image = _recipe(root)
    before = image.tag
    pkg = root / "src" / "pkg"
    if change == "edit requirements":
        (root / "requirements.txt").write_text("numpy>=1.25\n")
    elif change == "edit a source file":
        (pkg / "model.py").write_text("WIDTH = 8\n")
    elif change == "add a source file":
        (pkg / "extra.py").write_text("")
    elif change == "rename a source file":
        (pkg / "model.py").rename(pkg / "net.py")
    elif change == "add an empty folder":
        (pkg / "data").mkdir()
    elif change == "make a file executable":
        os.chmod(pkg / "model.py", 0o755)
    else:
        (root / "train.py").write_text("print('train v2')\n")
    assert image.tag != before


def test_caches_do_not_change_the_tag(tmp_path: Path) -> None:
    root = _project(tmp_path)
    image = _recipe(root)
    before = image.tag
    cache = root / "src" / "pkg" / "__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"\0junk")
    (root / "src" / "stale.pyc").write_bytes(b"\0")
    (root / "src" / ".git").mkdir()
    assert image.tag == before


def test_missing_referenced_files_are_spec_errors(tmp_path: Path) -> None:
    cases: list[tuple[Image, str]] = [
        (Image.from_debian_base("3.11").with_requirements(tmp_path / "nope.txt"),
         "with_requirements"),
        (Image.from_debian_base("3.11").with_source_folder(tmp_path / "nope"),
         "with_source_folder"),
        (Image.from_debian_base("3.11").with_source_file(tmp_path / "nope.py"),
         "with_source_file"),
    ]
    for image, field in cases:
        with pytest.raises(SpecError) as info:
            _ = image.tag
        assert info.value.field == field
        assert "does not exist" in info.value.rule
        assert "nope" in str(info.value)
        assert info.value.fix
    (tmp_path / "afile").write_text("")
    with pytest.raises(SpecError, match="is not a folder"):
        _ = Image.from_debian_base("3.11").with_source_folder(tmp_path / "afile").tag


def test_write_build_context_matches_what_the_tag_hashes(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    (root / "src" / "pkg" / "__pycache__").mkdir()
    (root / "src" / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    image = _recipe(root)
    out = image.write_build_context(tmp_path / "ctx")
    assert (out / "Dockerfile").read_text() == image.dockerfile()
    assert (out / CONTEXT_DIR / "2" / "requirements.txt").read_text() == "numpy>=1.24\n"
    assert (out / CONTEXT_DIR / "6" / "src" / "pkg" / "model.py").read_text() == "WIDTH = 4\n"
    assert (out / CONTEXT_DIR / "7" / "train.py").exists()
    assert not (out / CONTEXT_DIR / "6" / "src" / "pkg" / "__pycache__").exists()


# --- declared packages -----------------------------------------------------------------------


def test_declared_pip_packages(tmp_path: Path) -> None:
    (tmp_path / "base.txt").write_text("requests>=2\n")
    (tmp_path / "requirements.txt").write_text(
        "# pinned for the cluster\n"
        "--index-url https://example.com/simple\n"
        "-r base.txt\n"
        "Pillow==10.* \\\n"
        "    # trailing comment\n"
        "pywin32; sys_platform == 'win32'\n"
        "git+https://github.com/org/tool.git#egg=tool\n"
        "-e ./local\n"
        "\n"
        "datasets[audio] >= 2.0  # inline comment\n"
    )
    image = (
        Image.from_debian_base("3.11")
        .with_pip_packages("torch", "numpy>=1.24", "mylib @ https://x.example/mylib.whl",
                           "https://x.example/anon.whl")
        .with_requirements(tmp_path / "requirements.txt")
        .with_pip_packages("torch")
    )
    assert image.declared_pip_packages() == [
        "torch", "numpy", "mylib", "requests", "Pillow", "tool", "datasets",
    ]
    assert image.declared_pip_requirements() == [
        "torch", "numpy>=1.24", "mylib @ https://x.example/mylib.whl", "requests>=2",
        "Pillow==10.*", "pywin32; sys_platform == 'win32'", "tool", "datasets[audio] >= 2.0",
    ]


def test_requirements_with_markers_and_extras_are_checked_not_skipped() -> None:
    image = Image.from_debian_base("3.11").with_pip_packages(
        "pytest; python_version >= '3.8'", "not-a-real-shoal-pkg-a; python_version >= '3.8'",
        "not-a-real-shoal-pkg-b; sys_platform == 'no-such-platform'",
        "not-a-real-shoal-pkg-c[gpu]")
    assert image.declared_pip_packages() == [
        "pytest", "not-a-real-shoal-pkg-a", "not-a-real-shoal-pkg-c"]
    assert missing_locally(image) == ["not-a-real-shoal-pkg-a", "not-a-real-shoal-pkg-c"]


def test_versions_and_the_extras_dependencies_are_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution installed here (its metadata on sys.path, as pip leaves it) with an
    extra whose dependency is missing."""
    info = tmp_path / "shoal_fake_dist-1.4.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: shoal-fake-dist\nVersion: 1.4.0\n"
        "Provides-Extra: gpu\nProvides-Extra: cli\n"
        "Requires-Dist: pytest\n"
        'Requires-Dist: not-a-real-shoal-kernel>=2; extra == "gpu"\n'
        'Requires-Dist: pytest; extra == "cli"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    image = Image.from_debian_base("3.11").with_pip_packages(
        "shoal-fake-dist>=1.2", "shoal_fake_dist[cli]")
    assert missing_locally(image) == []
    for requirement, problem in [
        ("shoal-fake-dist>=2", "shoal-fake-dist>=2 (1.4.0 is installed)"),
        ("shoal-fake-dist[gpu]", "shoal-fake-dist[gpu] (its extra needs not-a-real-shoal-kernel)"),
        ("shoal-fake-dist[gpu]; python_version < '3'", None),
    ]:
        got = missing_locally(Image.from_debian_base("3.11").with_pip_packages(requirement))
        assert got == ([problem] if problem else []), requirement


def test_missing_locally_uses_metadata_not_imports() -> None:
    image = Image.from_debian_base("3.11").with_pip_packages(
        "pytest", "PyTest", "not-a-real-package-shoal-test", "Not_A_Real.Package-shoal-test2"
    )
    assert missing_locally(image) == [
        "not-a-real-package-shoal-test", "Not_A_Real.Package-shoal-test2",
    ]
    assert missing_locally(Image.from_debian_base("3.11")) == []


def test_a_flyte_plugin_shoal_ships_is_not_missing_locally() -> None:
    """Flyte's torch example keeps ``with_pip_packages("flyteplugins-pytorch")`` in its image;
    ``shoal.plugins.pytorch`` stands in for it, so a port is not told to install it."""
    image = Image.from_debian_base("3.11").with_pip_packages(
        "flyteplugins-pytorch", "flyteplugins_pytorch>=2", "flyteplugins-not-a-shoal-plugin")
    assert missing_locally(image) == ["flyteplugins-not-a-shoal-plugin"]


# --- validation ------------------------------------------------------------------------------


def _spec_error(call: Any, field: str, value: object) -> SpecError:
    with pytest.raises(SpecError) as info:
        call()
    err = info.value
    text = str(err)
    assert field in text
    assert repr(value) in text
    assert err.fix, "every error carries a fix"
    assert "Fix:" in text
    return err


_B = Image.from_debian_base("3.11")


@pytest.mark.parametrize(
    ("call", "field", "value", "fix_part"),
    [
        (lambda: Image.from_debian_base("3.9"), "python_version", "3.9", '"3.11"'),
        (lambda: Image.from_debian_base("3.11.2"), "python_version", "3.11.2", "'3.11'"),
        (lambda: Image.from_debian_base("py3.12"), "python_version", "py3.12", "'3.12'"),
        (lambda: Image.from_debian_base(3.11), "python_version", 3.11, '"3.11"'),  # type: ignore[arg-type]
        (lambda: Image.from_debian_base(name="My Image"), "name", "My Image", "'my-image'"),
        (lambda: Image.from_debian_base(registry="https://ghcr.io/org/"), "registry",
         "https://ghcr.io/org/", "'ghcr.io/org'"),
        (lambda: Image.from_base("https://x.example/img"), "image_uri",
         "https://x.example/img", "'x.example/img'"),
        (lambda: Image.from_base(""), "image_uri", "", "python:3.11"),
        (lambda: _B.with_pip_packages(), "with_pip_packages", (), "with_pip_packages("),
        (lambda: _B.with_pip_packages(""), "with_pip_packages", "", '"torch"'),
        (lambda: _B.with_pip_packages("   "), "with_pip_packages", "   ", '"torch"'),
        (lambda: _B.with_pip_packages(" torch"), "with_pip_packages", " torch", "'torch'"),
        (lambda: _B.with_pip_packages("torch numpy"), "with_pip_packages", "torch numpy",
         "with_pip_packages('torch', 'numpy')"),
        (lambda: _B.with_pip_packages("torch=2.0"), "with_pip_packages", "torch=2.0",
         "'torch==2.0'"),
        (lambda: _B.with_pip_packages("torch 2.1"), "with_pip_packages", "torch 2.1",
         "'torch==2.1'"),
        (lambda: _B.with_pip_packages("torch=="), "with_pip_packages", "torch==", "numpy>=1.24"),
        (lambda: _B.with_pip_packages("-r req.txt"), "with_pip_packages", "-r req.txt",
         "with_requirements"),
        (lambda: _B.with_pip_packages("--pre"), "with_pip_packages", "--pre", "pre=True"),
        (lambda: _B.with_pip_packages("pip install torch"), "with_pip_packages",
         "pip install torch", "'torch'"),
        (lambda: _B.with_pip_packages("!!!"), "with_pip_packages", "!!!", "numpy>=1.24"),
        (lambda: _B.with_pip_packages(3), "with_pip_packages", 3, "with_pip_packages("),  # type: ignore[arg-type]
        (lambda: _B.with_pip_packages("x", index_url="pypi.org/simple"),
         "with_pip_packages(index_url)", "pypi.org/simple", "'https://pypi.org/simple'"),
        (lambda: _B.with_pip_packages("x", extra_index_urls=["ftp://a"]),
         "with_pip_packages(extra_index_urls)", "ftp://a", "https://"),
        (lambda: _B.with_pip_packages("x", pre="yes"), "with_pip_packages(pre)", "yes",  # type: ignore[arg-type]
         "pre=True"),
        (lambda: _B.with_apt_packages(), "with_apt_packages", (), "with_apt_packages("),
        (lambda: _B.with_apt_packages("Git"), "with_apt_packages", "Git", "'git'"),
        (lambda: _B.with_apt_packages("git curl"), "with_apt_packages", "git curl",
         "with_apt_packages('git', 'curl')"),
        (lambda: _B.with_apt_packages("-y"), "with_apt_packages", "-y", "options"),
        (lambda: _B.with_apt_packages(""), "with_apt_packages", "", "with_apt_packages("),
        (lambda: _B.with_env_vars({"1ABC": "x"}), "with_env_vars", "1ABC", "'_1ABC'"),
        (lambda: _B.with_env_vars({"MY-VAR": "x"}), "with_env_vars", "MY-VAR", "'MY_VAR'"),
        (lambda: _B.with_env_vars({"N": 1}), "with_env_vars['N']", 1, "'1'"),  # type: ignore[dict-item]
        (lambda: _B.with_env_vars({"N": "a\nb"}), "with_env_vars['N']", "a\nb", "line breaks"),
        (lambda: _B.with_env_vars({}), "with_env_vars", {}, "with_env_vars({"),
        (lambda: _B.with_commands(), "with_commands", (), "with_commands("),
        (lambda: _B.with_commands(""), "with_commands", "", "with_commands("),
        (lambda: _B.with_commands("a\nb"), "with_commands", "a\nb", "' && '"),
        (lambda: _B.with_workdir("app"), "with_workdir", "app", "'/app'"),
        (lambda: _B.with_workdir("/my app"), "with_workdir", "/my app", "'/my app'"),
        (lambda: _B.with_source_folder(""), "with_source_folder", "", "Path("),
        (lambda: _B.with_source_file("x.py", dst=""), "with_source_file(dst)", "", 'dst="."'),
        (lambda: _B.with_requirements(None), "with_requirements", None, "requirements.txt"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_names_field_value_and_fix(
    call: Any, field: str, value: object, fix_part: str
) -> None:
    err = _spec_error(call, field, value)
    assert err.field == field
    assert fix_part in str(err.fix)


def test_valid_requirements_are_accepted() -> None:
    image = _B.with_pip_packages(
        "torch",
        "numpy>=1.24,<3",
        "torch==2.3.0+cu121",
        "datasets[audio,vision]>=2.0",
        "requests (>=2.0)",
        "pywin32; sys_platform == 'win32'",
        "mylib @ https://example.com/mylib-1.0-py3-none-any.whl",
        "git+https://github.com/org/repo.git@main",
        "jax[cuda12]",
        "a",
    )
    assert len(image.layers) == 1
    _B.with_apt_packages("libaio-dev", "g++", "python3.11", "curl=7.88.1-10", "libc6:amd64")


def test_constructor_validates_too() -> None:
    with pytest.raises(SpecError, match="base_image"):
        Image(base_image="has space")
    with pytest.raises(SpecError, match="workdir"):
        Image(base_image="python:3.11", workdir="relative")


def test_symlinks_in_a_folder_are_kept_as_links(tmp_path: Path) -> None:
    root = _project(tmp_path / "proj")
    link = root / "src" / "latest"
    link.symlink_to("pkg")
    image = Image.from_debian_base("3.11").with_source_folder(root / "src")
    before = image.tag
    out = image.write_build_context(tmp_path / "ctx")
    copied = out / CONTEXT_DIR / "0" / "src" / "latest"
    assert copied.is_symlink() and os.readlink(copied) == "pkg"
    link.unlink()
    link.symlink_to("pkg/model.py")
    assert image.tag != before
    with pytest.raises(SpecError, match="layers"):
        Image(base_image="python:3.11", layers=("RUN rm -rf /",))  # type: ignore[arg-type]
    assert Image(base_image="python:3.11", python_version=(3, 12)).python_version == "3.12"  # type: ignore[arg-type]
