"""The architecture as a test: the public surface, the light import, the layer rules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import shoal
import shoal.errors

SRC = Path(shoal.__file__).parent

PUBLIC = {
    "AMD_GPU", "GPU", "HABANA_GAUDI", "TPU", "Device", "Neuron",
    "Cache", "Dir", "File", "Image", "PodTemplate", "Resources", "Run", "TaskContext",
    "TaskEnvironment", "TaskTemplate", "__version__", "ctx", "custom_context", "errors",
    "get_custom_context", "group", "init", "init_from_config", "io", "map", "report", "run",
    "trace", "with_runcontext",
    "Backoff", "RetryStrategy", "ReusePolicy", "Secret", "Timeout",
    "Checkpoint", "latest_checkpoint", "logger", "log_metrics",
    "Profile", "profile_region",
}


def test_public_names_do_not_drift() -> None:
    assert set(shoal.__all__) == PUBLIC
    for name in shoal.__all__:
        assert hasattr(shoal, name), name
    for name in shoal.errors.__all__:
        assert issubclass(getattr(shoal.errors, name), shoal.errors.ShoalError)


def test_everything_else_is_private() -> None:
    public_modules = {"__init__.py", "errors.py", "clustered.py", "io.py", "report.py"}
    for path in SRC.iterdir():
        if (path.suffix == ".py" and path.name not in public_modules
                and not path.name.startswith("_")):  # _image.py: Flyte's private path
            pytest.fail(f"{path.name}: a public module; name it _{path.name}")
        if path.is_dir() and not path.name.startswith(("_", ".")) and path.name != "cli":
            pytest.fail(f"{path.name}/: a public package; name it _{path.name}")


def test_import_shoal_stays_light() -> None:
    code = ("import sys, shoal; heavy = ['torch', 'jax', 'numpy', 'kubernetes', 'obstore', "
            "'fsspec', 'flask', 'fastapi', 'starlette', 'uvicorn', 'yaml', 'psutil', "
            "'sqlite3', 'pandas', 'pyarrow', "
            "'pydantic']; import shoal.io; "
            "print([m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.startswith("shoal")}


# layer -> what it must never import (anywhere in the file, lazily or not)
RULES = {
    "_spec": ("shoal._engines", "shoal._driver", "shoal._storage", "shoal._runtime", "shoal.cli",
              "shoal._api"),
    "_api": ("shoal._engines", "shoal.cli"),
    "_runtime": ("shoal._engines", "shoal._driver", "shoal.cli"),
    "_storage": ("shoal._engines", "shoal._driver", "shoal.cli"),
    "_engines": ("shoal._api", "shoal._driver", "shoal.cli"),
    "_driver": ("shoal.cli",),
    # The web UI reads the records, the store and the run's files; it never drives a run.
    "_ui": ("shoal._engines", "shoal._driver", "shoal._api", "shoal.cli"),
}


def test_only_the_cli_imports_the_ui() -> None:
    bad = [f"{path.relative_to(SRC)} imports {name}"
           for path in SRC.rglob("*.py")
           if path.parent.name != "cli" and "_ui" not in path.relative_to(SRC).parts
           for name in _imports(path) if name == "shoal._ui" or name.startswith("shoal._ui.")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("layer", sorted(RULES))
def test_layer_rules(layer: str) -> None:
    bad = []
    for path in (SRC / layer).rglob("*.py"):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in RULES[layer]):
                bad.append(f"{path.relative_to(SRC)} imports {name}")
    assert not bad, "\n".join(bad)


def test_engines_do_not_import_each_other() -> None:
    engines = [p for p in (SRC / "_engines").iterdir() if p.is_dir() and p.name != "__pycache__"]
    for engine in engines:
        for path in engine.rglob("*.py"):
            for name in _imports(path):
                for other in engines:
                    if other != engine:
                        assert not name.startswith(f"shoal._engines.{other.name}"), (path, name)


def test_env_var_names_live_in_the_contract() -> None:
    """No module but the contract spells a SHOAL_* variable name."""
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).as_posix() == "_contract.py":
            continue
        tree = ast.parse(path.read_text())
        own = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name)}  # e.g. names listed in __all__
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.startswith("SHOAL_") and node.value.isupper()
                    and node.value not in own):
                offenders.append(f"{path.relative_to(SRC)}: {node.value}")
    assert not offenders, offenders
