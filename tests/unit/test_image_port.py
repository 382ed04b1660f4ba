"""The image API that code ported from Flyte 2 uses: ``shoal._image``'s ``PythonWheels`` and
``DIST_FOLDER``, ``Image.clone``, ``Image.from_uv_script`` and their errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import shoal
from shoal._api.image import Image
from shoal._api.image.image import DEBIAN_BASE_IMAGE
from shoal._image import DIST_FOLDER, PythonWheels
from shoal.errors import SpecError

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def _wheels(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"wheel bytes of " + name.encode())
    return folder


def _wheel_image(folder: Path, package: str = "mypkg") -> Image:
    return (Image.from_debian_base("3.11", name="ddp", install_shoal=False)
            .clone(addl_layer=PythonWheels(wheel_dir=folder, package_name=package)))


# --- shoal._image ----------------------------------------------------------------------------


def test_flyte_image_names_are_shoals_own_classes() -> None:
    assert shoal.Image is Image
    assert Path(shoal.__file__).resolve().parent.parent.parent / "dist" == DIST_FOLDER


# --- PythonWheels ------------------------------------------------------------------------------


def test_wheels_render_a_copy_and_two_pip_steps(tmp_path: Path) -> None:
    image = _wheel_image(_wheels(tmp_path / "dist", "mypkg-1.0-py3-none-any.whl"))
    assert image.dockerfile().splitlines()[3:] == [
        'COPY ["_shoal_context/0/wheels", "/tmp/shoal/_shoal_context/0/wheels/"]',
        "RUN python -m pip install --no-cache-dir --find-links "
        "/tmp/shoal/_shoal_context/0/wheels mypkg",
        "RUN python -m pip install --no-cache-dir --no-index --no-deps --force-reinstall "
        "--find-links /tmp/shoal/_shoal_context/0/wheels mypkg",
    ]


def test_wheel_pip_options_render(tmp_path: Path) -> None:
    layer = PythonWheels(wheel_dir=tmp_path, package_name="mypkg", pre=True,
                         index_url="https://download.pytorch.org/whl/cpu")
    first, second = layer.render("ctx")[1:]
    assert "--index-url https://download.pytorch.org/whl/cpu --pre --find-links" in first
    assert "--index-url" not in second and "--pre" in second


def test_the_tag_follows_the_wheels_and_only_the_wheels(tmp_path: Path) -> None:
    folder = _wheels(tmp_path / "dist", "mypkg-1.0-py3-none-any.whl")
    image = _wheel_image(folder)
    tag = image.tag
    assert _wheel_image(folder).tag == tag  # deterministic
    (folder / "notes.txt").write_text("not a wheel")
    assert image.tag == tag
    (folder / "mypkg-1.0-py3-none-any.whl").write_bytes(b"rebuilt")
    assert image.tag != tag


def test_build_context_holds_the_wheels(tmp_path: Path) -> None:
    folder = _wheels(tmp_path / "dist", "mypkg-1.0-py3-none-any.whl", "other-2.0-py3-none-any.whl")
    (folder / "notes.txt").write_text("left out")
    root = _wheel_image(folder).write_build_context(tmp_path / "ctx")
    copied = sorted(p.name for p in (root / "_shoal_context/0/wheels").iterdir())
    assert copied == ["mypkg-1.0-py3-none-any.whl", "other-2.0-py3-none-any.whl"]


def test_a_missing_wheel_folder_has_a_tag_but_is_refused_at_build(tmp_path: Path) -> None:
    image = _wheel_image(tmp_path / "not-built")
    assert len(image.tag) == 16 and image.uri().startswith("ddp:")
    with pytest.raises(SpecError, match="does not exist") as err:
        image.write_build_context(tmp_path / "ctx")
    assert "python -m build --wheel" in str(err.value)


def test_a_folder_without_the_packages_wheel_is_refused_at_build(tmp_path: Path) -> None:
    image = _wheel_image(_wheels(tmp_path / "dist", "other-1.0-py3-none-any.whl"), "my-pkg")
    with pytest.raises(SpecError, match=r"other-1\.0-py3-none-any\.whl, none of this package"):
        image.write_build_context(tmp_path / "ctx")
    # Wheel file names use underscores for the dashes of a distribution name.
    _wheels(tmp_path / "dist", "my_pkg-1.0-py3-none-any.whl")
    image.write_build_context(tmp_path / "ctx")


def test_flyte_wheels_say_shoal_stands_in(tmp_path: Path) -> None:
    image = _wheel_image(tmp_path / "dist", "flyte")
    with pytest.raises(SpecError, match="Shoal's images already install Shoal"):
        image.write_build_context(tmp_path / "ctx")


def test_the_local_check_names_wheel_packages_but_not_flyte(tmp_path: Path) -> None:
    image = _wheel_image(tmp_path, "mypkg").clone(
        addl_layer=PythonWheels(wheel_dir=tmp_path, package_name="flyte"))
    assert image.declared_pip_packages() == ["mypkg"]


@pytest.mark.parametrize("kwargs, field", [
    ({"package_name": "mypkg==1.0"}, "PythonWheels(package_name)"),
    ({"package_name": ""}, "PythonWheels(package_name)"),
    ({"package_name": "mypkg", "pre": "yes"}, "PythonWheels(pre)"),
    ({"package_name": "mypkg", "index_url": "pypi.org"}, "PythonWheels(index_url)"),
])
def test_wheel_layer_arguments_are_checked(tmp_path: Path, kwargs: dict[str, object],
                                           field: str) -> None:
    with pytest.raises(SpecError) as err:
        PythonWheels(wheel_dir=tmp_path, **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


# --- clone ---------------------------------------------------------------------------------------


def test_clone_changes_base_fields_and_keeps_the_original() -> None:
    base = Image.from_debian_base("3.11").with_pip_packages("numpy")
    c = base.clone(name="team/trainer", registry="ghcr.io/org")
    assert (c.name, c.registry, c.layers) == ("team/trainer", "ghcr.io/org", base.layers)
    assert (base.name, base.registry) == ("shoal", None)
    assert c.uri().startswith("ghcr.io/org/team/trainer:")


def test_clone_python_version_moves_a_debian_base() -> None:
    c = Image.from_debian_base("3.11").clone(python_version=(3, 12))
    assert (c.python_version, c.base_image) == ("3.12", DEBIAN_BASE_IMAGE.format(
        python_version="3.12"))
    other = Image.from_base("nvcr.io/nvidia/pytorch:24.05-py3").clone(python_version="3.12")
    assert other.base_image == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert Image.from_debian_base("3.11").clone(base_image="python:3.12").base_image == \
        "python:3.12"


def test_a_sealed_image_refuses_layers() -> None:
    sealed = Image.from_debian_base("3.11").clone(extendable=False)
    with pytest.raises(SpecError, match="sealed"):
        sealed.with_pip_packages("torch")
    assert sealed.clone(extendable=True).with_pip_packages("torch").layers


@pytest.mark.parametrize("kwargs, field", [
    ({"addl_layer": "RUN echo"}, "clone(addl_layer)"),
    ({"registry_secret": "my-secret"}, "clone(registry_secret)"),
    ({"platform": ("linux/arm64",)}, "clone(platform)"),
    ({"name": "Bad Name"}, "name"),
])
def test_clone_arguments_are_checked(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as err:
        Image.from_debian_base("3.11").clone(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


# --- from_uv_script ------------------------------------------------------------------------------


def _script(tmp_path: Path, block: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text("#!/usr/bin/env -S uv run --script\n" + block + "\nimport shoal\n")
    return path


def test_from_uv_script_installs_the_blocks_dependencies(tmp_path: Path) -> None:
    path = _script(tmp_path, '# /// script\n# requires-python = ">=3.10"\n# dependencies = [\n'
                             '#    "flyte",\n#    "numpy>=1.24",\n#    "httpx",\n# ]\n# ///')
    image = Image.from_uv_script(path, name="job", pre=True)
    assert (image.name, image.python_version) == ("job", HERE)
    assert image.dockerfile().splitlines()[-1] == \
        "RUN python -m pip install --no-cache-dir --pre 'numpy>=1.24' httpx"
    assert image.install_shoal  # Shoal, not the flyte dependency, is what carries the API


def test_from_uv_script_picks_the_oldest_python_the_block_allows(tmp_path: Path) -> None:
    later = f"3.{sys.version_info.minor + 1}"
    path = _script(tmp_path, f'# /// script\n# requires-python = ">={later}"\n# ///')
    assert Image.from_uv_script(path, name="job").python_version == later
    with pytest.raises(SpecError, match=f"excludes the image's Python {HERE}") as err:
        Image.from_uv_script(path, name="job", python_version=HERE)
    assert err.value.field == f"from_uv_script({path}:2).requires-python"


@pytest.mark.parametrize("block, line, rule", [
    ('# /// script\n# dependencies = ["numpy",\n# ///', 3, "is not valid TOML"),
    ('# /// script\n# dependencies = ["numpy"]\n', 4, "must start with '# '"),
    ('# /// script\nimport os\n# ///', 3, "must start with '# '"),
    ('# /// script\n# dependencies = ["numpy=1.24"]\n# ///', 2, "not a pip requirement"),
    ('# /// script\n# dependencies = "numpy"\n# ///', 2, "must be a list of strings"),
    ('# /// script\n# python = "3.11"\n# ///', 2, "PEP 723 allows only"),
    ('# /// script\n# requires-python = "3.11"\n# ///', 2, "must be version specifiers"),
    ('# /// script\n# ///\n# /// script\n# ///', 4, "only one"),
    ('# /// script\n# dependencies = ["pkg @ file:///src/pkg"]\n# ///', 2, "local project"),
])
def test_bad_blocks_name_the_file_and_line(tmp_path: Path, block: str, line: int,
                                           rule: str) -> None:
    path = _script(tmp_path, block)
    with pytest.raises(SpecError, match=rule) as err:
        Image.from_uv_script(path, name="job")
    assert err.value.field.startswith(f"from_uv_script({path}:{line})")


def test_a_block_never_closed_names_its_opening_line(tmp_path: Path) -> None:
    path = tmp_path / "job.py"
    path.write_text('"""doc"""\n# /// script\n# dependencies = ["numpy"]\n')
    with pytest.raises(SpecError, match="never closed") as err:
        Image.from_uv_script(path, name="job")
    assert err.value.field == f"from_uv_script({path}:2)"


def test_a_script_without_a_block_or_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="has no '# /// script' block"):
        Image.from_uv_script(_script(tmp_path, ""), name="job")
    with pytest.raises(SpecError, match="does not exist"):
        Image.from_uv_script(tmp_path / "missing.py", name="job")


# --- Flyte's other from_debian_base arguments and with_local_v2 ---------------------------------


def test_install_flyte_is_install_shoal_and_with_local_v2_carries_shoal() -> None:
    bare = Image.from_debian_base("3.11", install_flyte=False)
    assert not bare.install_shoal and "_shoal_context/shoal" not in bare.dockerfile()
    assert bare.with_local_v2().install_shoal
    assert bare.with_local_v2().dockerfile() == Image.from_debian_base("3.11").dockerfile()
    with pytest.raises(SpecError, match="contradicts install_shoal=False"):
        Image.from_debian_base("3.11", install_shoal=False, install_flyte=True)


@pytest.mark.parametrize("kwargs, field", [
    ({"flyte_version": "2.0.0"}, "from_debian_base(flyte_version)"),
    ({"registry_secret": "pull"}, "from_debian_base(registry_secret)"),
    ({"platform": ("linux/amd64", "linux/arm64")}, "from_debian_base(platform)"),
])
def test_flyte_arguments_shoal_cannot_honour_are_refused(kwargs: dict[str, object],
                                                          field: str) -> None:
    with pytest.raises(SpecError) as err:
        Image.from_debian_base("3.11", **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field and err.value.fix
