"""How a run reaches the Slurm engine without a cluster: `shoal.init(slurm_settings=)`, the
config file's ``slurm_settings:``, and `shoal run --engine slurm --dry-run`, which needs no
Slurm command on PATH (the CLI runs as a subprocess whose PATH holds nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._driver import config
from shoal.errors import SpecError

PROGRAM = Path(__file__).with_name("slurm_program.py")
GOOD = ("partition: batch\nenvironments: {slurm_prep: {partition: cpu}}\n"
        "priority_classes: {high: {qos: urgent}}\n")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "rule"), [
    ("partiton: gpu\n", "is not a Slurm setting"),
    ("time_limit: soon\n", "Slurm time"),
    ("- gpu\n", "mapping of Slurm settings"),
])
def test_init_with_a_bad_settings_file_fails_and_chooses_nothing(
        tmp_path: Path, text: str, rule: str) -> None:
    before = {k: os.environ.get(k) for k in (contract.ENGINE, contract.STORE, contract.HOME,
                                              contract.SLURM_SETTINGS)}
    with pytest.raises(SpecError) as err:
        shoal.init(engine="slurm", store=(tmp_path / "s").as_uri(), home=str(tmp_path / "h"),
                   slurm_settings=write(tmp_path / "slurm.yaml", text))
    assert err.value.field.startswith("init(slurm_settings=...)") and rule in err.value.rule
    assert {k: os.environ.get(k) for k in before} == before


def test_init_with_a_missing_settings_file_fails(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot be read"):
        shoal.init(engine="slurm", slurm_settings=tmp_path / "nope.yaml")
    assert contract.SLURM_SETTINGS not in os.environ and contract.ENGINE not in os.environ


def test_init_with_a_good_settings_file_sets_its_absolute_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "slurm.yaml", GOOD)
    monkeypatch.chdir(tmp_path)
    shoal.init(engine="slurm", slurm_settings="slurm.yaml")
    assert os.environ[contract.SLURM_SETTINGS] == str(tmp_path / "slurm.yaml")
    assert os.environ[contract.ENGINE] == "slurm"
    from shoal._engines.slurm.engine import slurm_settings

    assert slurm_settings("file:///x").placement_for("slurm_prep", None).partition == "cpu"


def test_the_config_files_slurm_settings_are_relative_to_it_and_reach_init(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (contract.HOME, contract.STORE):
        monkeypatch.setenv(name, os.environ[name])  # put back after the test
    folder = tmp_path / "project" / ".shoal"
    folder.mkdir(parents=True)
    write(folder / "slurm.yaml", GOOD)
    path = write(folder / "config.yaml", "engine: slurm\nslurm_settings: slurm.yaml\n")
    monkeypatch.chdir(tmp_path)  # not the file's folder: the path is the file's
    assert config.load(path).slurm_settings == str(folder / "slurm.yaml")
    shoal.init_from_config(path)
    assert os.environ[contract.SLURM_SETTINGS] == str(folder / "slurm.yaml")
    assert os.environ[contract.ENGINE] == "slurm"


def test_a_bad_settings_file_named_by_the_config_fails_init_from_config(
        tmp_path: Path) -> None:
    write(tmp_path / "slurm.yaml", "qos: 'a b'\n")
    path = write(tmp_path / "config.yaml", "engine: slurm\nslurm_settings: slurm.yaml\n")
    with pytest.raises(SpecError) as err:
        shoal.init_from_config(path)
    assert err.value.field == "init(slurm_settings=...): qos"
    assert contract.ENGINE not in os.environ and contract.SLURM_SETTINGS not in os.environ


def shoal_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`shoal ...` on a PATH with no Slurm command (nor anything else) on it."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(empty)}
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)


def test_a_dry_run_prints_every_script_without_slurm_installed(tmp_path: Path) -> None:
    settings = write(tmp_path / "slurm.yaml", GOOD)
    p = shoal_cli(tmp_path, "run", "--engine", "slurm", "--slurm-settings", str(settings),
                  "--dry-run", "--name", "r-dry", str(PROGRAM), "main")
    assert p.returncode == 0, p.stderr
    assert "slurm engine: the driver task 'slurm_driver.main' runs here" in p.stdout
    assert "# --- slurm_prep.sbatch\n#!/bin/bash\n" in p.stdout
    assert "# --- slurm_train.sbatch\n#!/bin/bash\n" in p.stdout
    assert "# --- slurm_driver.sbatch" not in p.stdout  # the driver is a local process
    assert "#SBATCH --partition=cpu" in p.stdout and "#SBATCH --qos=urgent" in p.stdout
    assert "their images are not used on Slurm" in p.stderr  # slurm_train's, no runtime


def test_a_dry_run_writes_one_sbatch_file_per_environment_to_out(tmp_path: Path) -> None:
    settings = write(tmp_path / "slurm.yaml", GOOD)
    common = ("run", "--engine", "slurm", "--slurm-settings", str(settings), "--dry-run",
              "--name", "r-dry", str(PROGRAM), "main")
    printed = shoal_cli(tmp_path, *common)
    p = shoal_cli(tmp_path, *common[:-2], "--out", "scripts", *common[-2:])
    assert p.returncode == 0, p.stderr
    out = tmp_path / "scripts"
    assert sorted(f.name for f in out.iterdir()) == ["slurm_prep.sbatch", "slurm_train.sbatch"]
    assert "wrote 2 sbatch script(s) to scripts/" in p.stdout
    for name in ("slurm_prep.sbatch", "slurm_train.sbatch"):
        text = (out / name).read_text()  # the same script the plain dry run printed
        assert f"# --- {name}\n{text}" in printed.stdout


def test_a_bad_settings_file_is_named_as_the_cli_was_given_it(tmp_path: Path) -> None:
    settings = write(tmp_path / "slurm.yaml", "partiton: gpu\n")
    p = shoal_cli(tmp_path, "run", "--engine", "slurm", "--slurm-settings", str(settings),
                  "--dry-run", str(PROGRAM), "main")
    assert p.returncode == 2
    assert "--slurm-settings: partiton='gpu': is not a Slurm setting" in p.stderr


def test_shoal_engine_slurm_chooses_it_for_the_cli(tmp_path: Path) -> None:
    write(tmp_path / "slurm.yaml", GOOD)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), contract.ENGINE: "slurm",
           contract.SLURM_SETTINGS: str(tmp_path / "slurm.yaml")}
    p = subprocess.run([sys.executable, "-m", "shoal.cli.main", "run", "--dry-run",
                        str(PROGRAM), "main"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert "slurm engine:" in p.stdout and "#SBATCH --partition=cpu" in p.stdout


def test_only_a_driver_that_shares_the_home_detaches_and_cleans_up() -> None:
    """The seam the CLI reaches Slurm through: `detached_driver`, `clean_up`, `driver_for`."""
    from shoal._driver import remote
    from shoal.errors import EngineError

    with pytest.raises(SpecError) as err:
        remote.detached_driver("local")
    assert (err.value.field, err.value.value) == ("--detach", "local")
    assert "needs --engine slurm" in err.value.rule
    assert remote.clean_up("local", "r1") is None
    driver = remote.detached_driver("slurm")
    assert driver.name == "slurm" and "shoal cancel r1" in driver.how_to_stop("r1")
    with pytest.raises(EngineError, match="not followed through the store"):
        driver.render([])
    with pytest.raises(EngineError, match="not followed through the store"):
        driver.io("r1")
