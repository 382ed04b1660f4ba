"""The architecture as a test: the public surface, the light import, the one order of the layers."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import shoal
import shoal.errors
from shoal import _contract as contract

SRC = Path(shoal.__file__).parent

PUBLIC = {
    "AMD_GPU", "GPU", "HABANA_GAUDI", "TPU", "Device", "Neuron",
    "Cache", "Dir", "File", "Image", "PodTemplate", "Resources", "Run", "TaskContext",
    "TaskEnvironment", "TaskTemplate", "__version__", "ctx", "custom_context", "errors",
    "get_custom_context", "group", "init", "init_from_config", "io", "map", "report", "run",
    "trace", "with_runcontext",
    "Backoff", "NotSecret", "RetryStrategy", "ReusePolicy", "Secret", "Timeout",
    "Checkpoint", "latest_checkpoint", "logger", "log_metrics",
    "Profile", "profile_region",
}


def test_public_names_do_not_drift() -> None:
    assert set(shoal.__all__) == PUBLIC
    for name in shoal.__all__:
        assert hasattr(shoal, name), name
    for name in set(shoal.errors.__all__) - ERROR_VALUES:
        assert issubclass(getattr(shoal.errors, name), shoal.errors.ShoalError)


CLUSTERED = {"ClusterFailurePolicy", "ClusteredTaskEnvironment", "DeepSpeedCheckpoint",
             "ElasticSampler", "JaxRun", "TorchRun"}
ERRORS = {
    "BaseRuntimeError", "EngineError", "InputError", "MissingDependencyError",
    "NonRecoverableError", "NotFoundError", "OOMError", "ObjectNotFound", "RunCancelled",
    "RuntimeSystemError", "RuntimeUnknownError", "RuntimeUserError", "ShoalError",
    "ShoalSystemError", "SpecError", "StoreError", "TaskFailed", "TaskTimeout",
    "TaskTimeoutError", "UnsupportedTypeError", "UserError", "UserCodeError",
}
ERROR_VALUES = {"FailureInfo"}  # in shoal.errors for annotations (TaskFailed.info), not raised


def test_clustered_public_names_do_not_drift() -> None:
    import shoal.clustered

    assert set(shoal.clustered.__all__) == CLUSTERED
    for name in shoal.clustered.__all__:
        assert getattr(shoal.clustered, name).__module__ == "shoal.clustered", name
    defined = {n for n, v in vars(shoal.clustered).items() if isinstance(v, type)
               and v.__module__ == "shoal.clustered" and not n.startswith("_")}
    assert defined <= CLUSTERED, defined - CLUSTERED  # a new public class must be listed


def test_extras_and_echo_public_names_do_not_drift() -> None:
    """`shoal.extras` (Flyte's `flyte.extras`) and `shoal.plugins.echo` (`flyteplugins.echo`):
    each name listed, defined where it is exported, and no public class left out."""
    import shoal.extras
    import shoal.plugins.echo
    import shoal.plugins.echo.task

    for module, names, home in ((shoal.extras, {"Sleep"}, "shoal.extras"),
                                (shoal.plugins.echo, {"Echo"}, "shoal.plugins.echo.task")):
        assert set(module.__all__) == names, module.__name__
        for name in names:
            assert getattr(module, name).__module__ == home, name
    defined = {n for n, v in vars(shoal.extras).items() if isinstance(v, type)
               and v.__module__ == "shoal.extras" and not n.startswith("_")}
    assert defined <= {"Sleep"}, defined


def test_errors_public_names_do_not_drift() -> None:
    assert set(shoal.errors.__all__) == ERRORS | ERROR_VALUES
    for name in ERRORS:
        assert issubclass(getattr(shoal.errors, name), shoal.errors.ShoalError), name
    defined = {n for n, v in vars(shoal.errors).items() if isinstance(v, type)
               and v.__module__ == "shoal.errors" and not n.startswith("_")}
    assert defined <= ERRORS | ERROR_VALUES, defined - ERRORS - ERROR_VALUES


def test_types_users_annotate_with_are_exported() -> None:
    """What a user's code names in an annotation: a task's context and checkpoint, a run
    handle, the failure a caught TaskFailed carries."""
    from shoal._driver.handle import Run
    from shoal._storage.checkpoints import Checkpoint

    assert shoal.Checkpoint is Checkpoint and shoal.Run is Run
    assert shoal.errors.FailureInfo is type(shoal.errors.RuntimeUserError(
        shoal.errors.FailureInfo(task="t", action="a0", attempt=0, kind="user",
                                 message="m")).info)
    for name in ("Checkpoint", "Run", "TaskContext", "File", "Dir"):
        assert name in shoal.__all__, name


def test_everything_else_is_private() -> None:
    # remote.py, storage.py, extras.py: where Flyte code's `flyte.remote`, `flyte.storage`
    # and `flyte.extras` land
    public_modules = {"__init__.py", "errors.py", "clustered.py", "io.py", "report.py",
                      "remote.py", "storage.py", "extras.py"}
    for path in SRC.iterdir():
        if (path.suffix == ".py" and path.name not in public_modules
                and not path.name.startswith("_")):  # _image.py: Flyte's private path
            pytest.fail(f"{path.name}: a public module; name it _{path.name}")
        if path.is_dir() and not path.name.startswith(("_", ".")) and path.name not in (
                "cli", "plugins"):  # plugins/: shoal.plugins.*, Flyte's flyteplugins.*
            pytest.fail(f"{path.name}/: a public package; name it _{path.name}")


def test_import_shoal_stays_light() -> None:
    code = ("import sys, shoal; heavy = ['torch', 'jax', 'numpy', 'kubernetes', 'obstore', "
            "'fsspec', 'flask', 'fastapi', 'starlette', 'uvicorn', 'yaml', 'psutil', "
            "'sqlite3', 'pandas', 'pyarrow', 'importlib.metadata', "
            "'pydantic']; import shoal.io; "
            "print([m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def _imports(path: Path) -> set[str]:
    """The Shoal modules ``path`` imports, anywhere in the file (lazily, or for type checks
    only: a layer that names another for its types still depends on it)."""
    return _imports_of(path.read_text(), path.relative_to(SRC))


def _imports_of(source: str, where: Path | str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            pytest.fail(f"{where}: a relative import; spell shoal.…")
        elif isinstance(node, ast.ImportFrom) and node.module == "shoal":
            names |= {f"shoal.{a.name}" for a in node.names}  # from shoal import _contract
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {n for n in names if n == "shoal" or n.startswith("shoal.")}


# The layers, bottom to top. A layer imports only the layers below it, never one beside or
# above it (lazily or not); the foundation imports no other layer.
#
#   foundation   errors, _contract (the env-var contract), _spec (frozen descriptions; the
#                rules of names in _spec/names.py)
#   registry     _plugins/__init__.py: plugins' engine-side parts by config type
#   _storage     the store, codecs, records, checkpoints
#   _runtime     what runs in a task process: the task context, worker, ranks, launcher
#   _api | _engines    what users write | the engines: side by side
#   _driver      one run on any engine; shoal.run / init / Run / with_runcontext
#   public | _ui       shoal/__init__.py, io.py, report.py, clustered.py, extras.py, _image.py,
#                      plugins/ |
#                the web UI, which asks a run to stop as the CLI does (_driver/stop_requests.py)
#   _plugins     _plugins/<name>/: a plugin's engine-side parts, loaded only by the registry
#   cli          the commands
LAYERS: tuple[tuple[str, ...], ...] = (
    ("foundation",),
    ("registry",),
    ("_storage",),
    ("_runtime",),
    ("_api", "_engines"),
    ("_driver",),
    ("public", "_ui"),
    ("_plugins",),
    ("cli",),
)
RANK = {layer: rank for rank, names in enumerate(LAYERS) for layer in names}
FOUNDATION = {"errors", "_contract", "_spec"}
PUBLIC_FILES = {"__init__", "io", "report", "clustered", "_image", "plugins", "remote",
                "storage", "extras"}


def _layer(top: str) -> str:
    """The layer of ``shoal.<top>`` (a top-level module or package of Shoal)."""
    if top in FOUNDATION:
        return "foundation"
    if top in PUBLIC_FILES or top not in RANK:
        return "public"  # `import shoal`, `from shoal import Run`: the package's surface
    return top


def _layer_of_file(path: Path) -> str:
    if path.relative_to(SRC).as_posix() == "_plugins/__init__.py":
        return "registry"
    top = path.relative_to(SRC).parts[0].removesuffix(".py")
    assert top in FOUNDATION | PUBLIC_FILES or top in RANK, (
        f"{top}: give it a layer in test_layers.py (LAYERS, FOUNDATION or PUBLIC_FILES)")
    return _layer(top)


def _layer_of_module(name: str) -> str:
    if name == "shoal._plugins":
        return "registry"
    return _layer(name.split(".")[1]) if name != "shoal" else "public"


def _sources() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts]


def test_every_file_has_a_layer() -> None:
    for path in _sources():
        _layer_of_file(path)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    bad = []
    for path in _sources():
        mine = _layer_of_file(path)
        for name in sorted(_imports(path)):
            theirs = _layer_of_module(name)
            if theirs != mine and RANK[theirs] >= RANK[mine]:
                bad.append(f"{path.relative_to(SRC)} ({mine}) imports {name} ({theirs})")
    assert not bad, "\n".join(bad)


def test_the_foundation_imports_no_other_layer() -> None:
    """errors, the contract and the specs load first, in any process: errors and the contract
    import nothing of Shoal, the specs nothing but errors (and each other)."""
    bad = []
    for path in _sources():
        top = path.relative_to(SRC).parts[0].removesuffix(".py")
        if top not in FOUNDATION:
            continue
        allowed = {"shoal.errors"} if top == "_spec" else set()
        bad += [f"{path.relative_to(SRC)} imports {name}" for name in sorted(_imports(path))
                if name not in allowed and name.split(".")[:2] != ["shoal", top]]
    assert not bad, "\n".join(bad)


def test_only_the_cli_imports_the_ui() -> None:
    bad = [f"{path.relative_to(SRC)} imports {name}"
           for path in _sources()
           if path.parent.name != "cli" and "_ui" not in path.relative_to(SRC).parts
           for name in _imports(path) if name == "shoal._ui" or name.startswith("shoal._ui.")]
    assert not bad, "\n".join(bad)


# Packages under `_engines/` that are no engine: what every engine and the CLI share (images:
# the OCI builders and the Debian base). Each imports no engine, and is used from outside
# only through its `__init__`.
SHARED_ENGINE_PACKAGES = {"images"}


def _engine_packages() -> list[Path]:
    return [p for p in (SRC / "_engines").iterdir() if p.is_dir() and p.name != "__pycache__"
            and p.name not in SHARED_ENGINE_PACKAGES]


def test_engines_do_not_import_each_other() -> None:
    engines = _engine_packages()
    assert {p.name for p in engines} <= set(contract.ENGINES)
    for engine in engines:
        for path in engine.rglob("*.py"):
            for name in _imports(path):
                for other in engines:
                    if other != engine:
                        assert not name.startswith(f"shoal._engines.{other.name}"), (path, name)


def test_shared_engine_packages_import_no_engine_and_have_one_door() -> None:
    engines = {p.name for p in _engine_packages()}
    bad = []
    for package in SHARED_ENGINE_PACKAGES:
        assert (SRC / "_engines" / package / "__init__.py").is_file(), package
        for path in (SRC / "_engines" / package).rglob("*.py"):
            bad += [f"{path.relative_to(SRC)} imports {name}" for name in _imports(path)
                    if name.split(".")[:2] == ["shoal", "_engines"] and len(name.split(".")) > 2
                    and name.split(".")[2] in engines]
    used = 0
    for path in _sources():
        rel = path.relative_to(SRC).parts
        for name in _imports(path):
            parts = name.split(".")
            if parts[:2] == ["shoal", "_engines"] and len(parts) > 2 \
                    and parts[2] in SHARED_ENGINE_PACKAGES and rel[:2] != ("_engines", parts[2]):
                used += 1
                if len(parts) > 3:
                    bad.append(f"{path.relative_to(SRC)} imports {name} (use shoal._engines."
                               f"{parts[2]})")
    assert not bad, "\n".join(bad)
    assert used >= 2  # the CLI and the config file use it: the rule looked at real uses


# `shoal queue` shows this machine's pool of the local engine: the one engine package a
# command may read, for a verb that exists only for that engine.
CLI_MAY_IMPORT = {"local"}


def test_the_cli_names_no_engine() -> None:
    """The CLI parses and prints: what differs between engines (dry-run plans, --detach, the
    clean-up of a crashed run, deploy) is reached through `shoal._driver` and the engine
    seam, so no command imports an engine's package or spells an engine's name as a value
    (a comparison, a choice, an argv item)."""
    from shoal import _contract as contract

    engines = {p.name for p in _engine_packages()}
    assert {"slurm", "kubernetes"} <= engines <= set(contract.ENGINES)
    files = sorted((SRC / "cli").glob("*.py"))
    assert len(files) > 10 and any(f.name == "run_cmd.py" for f in files)  # not vacuous
    bad = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in modules:
                parts = name.split(".")
                if parts[:2] == ["shoal", "_engines"] and len(parts) > 2 \
                        and parts[2] in engines - CLI_MAY_IMPORT:
                    bad.append(f"cli/{path.name}:{node.lineno} imports {name}")
            if isinstance(node, ast.Constant) and node.value in contract.ENGINES:
                bad.append(f"cli/{path.name}:{node.lineno} spells the engine {node.value!r}")
    assert not bad, "\n".join(bad)


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


# Where a name comes in from a user, a file or a store, and where one is rendered into a path,
# a script or a plan: each checks it with the rules of `shoal._spec.names`, none with its own.
NAME_DOORS = (
    "cli/main.py", "_driver/runcontext.py", "_driver/runner.py", "_driver/remote.py",
    "_api/environment.py", "_api/task.py", "_api/group.py", "_api/io.py",
    "_storage/records/runs.py", "_storage/records/mirror.py", "_storage/records/remote.py",
    "_storage/store.py", "_ui/app.py", "_runtime/node/allocation_state.py",
    "_engines/slurm/script.py", "_engines/kubernetes/manifests.py", "_engines/local/plan.py",
)


def test_names_are_checked_by_the_one_module_of_their_rules() -> None:
    assert (SRC / "_spec" / "names.py").is_file()
    assert not (SRC / "_api" / "names.py").exists()  # moved, not re-exported
    for door in NAME_DOORS:
        text = (SRC / door).read_text()
        assert ("shoal._spec.names import" in text
                or "from shoal._spec import names" in text), door


# The sub-packages of `_storage`, each used from outside only through its `__init__`: another
# module imports the names in the package's `__all__` (`from shoal._storage.records import
# Records`, or `from shoal._storage import codecs` and then `codecs.encode`), never one of its
# modules. What the `__init__` may import eagerly, and how a module that imports torch is
# reached instead, is written in each package's docstring.
STORAGE_PACKAGES = ("checkpoints", "codecs", "records")


def _exported(package: str) -> set[str]:
    """The ``__all__`` of the package at ``package`` (a folder under src/shoal)."""
    tree = ast.parse((SRC / package / "__init__.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                 for t in node.targets)):
            return {e.value for e in node.value.elts}  # type: ignore[attr-defined]
    pytest.fail(f"{package}/__init__.py: no __all__")


def _storage_door_breaches(where: str, source: str) -> tuple[list[str], Counter[str]]:
    """The imports in ``source`` (the file ``where``, relative to src/shoal) that go around a
    `_storage` sub-package's door, and how many uses of each such package it checked."""
    inside = {p for p in STORAGE_PACKAGES if where.startswith(f"_storage/{p}/")}
    bad: list[str] = []
    checked: Counter[str] = Counter()
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> package, for `from shoal._storage import codecs`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if (parts[:2] == ["shoal", "_storage"] and len(parts) > 2
                        and parts[2] in STORAGE_PACKAGES and parts[2] not in inside):
                    checked[parts[2]] += 1
                    bad.append(f"{where}: import {a.name} (use from shoal._storage.{parts[2]} "
                               "import NAME)")
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] != ["shoal", "_storage"]:
                continue
            if len(parts) == 2:
                for a in node.names:
                    if a.name in STORAGE_PACKAGES and a.name not in inside:
                        aliases[a.asname or a.name] = a.name
                continue
            package = parts[2]
            if package not in STORAGE_PACKAGES or package in inside:
                continue
            checked[package] += 1
            if len(parts) > 3:
                bad.append(f"{where}: from {node.module} import ... (a module of "
                           f"_storage/{package}/: import from shoal._storage.{package})")
                continue
            bad += [f"{where}: {a.name} is not in shoal._storage.{package}.__all__"
                    for a in node.names if a.name not in _exported(f"_storage/{package}")]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            package = aliases[node.value.id]
            checked[package] += 1
            if node.attr not in _exported(f"_storage/{package}"):
                bad.append(f"{where}: {node.value.id}.{node.attr} is not in "
                           f"shoal._storage.{package}.__all__")
    return bad, checked


def test_storage_sub_packages_are_used_only_through_their_init() -> None:
    bad: list[str] = []
    checked: Counter[str] = Counter()
    for path in _sources():
        breaches, seen = _storage_door_breaches(path.relative_to(SRC).as_posix(),
                                                path.read_text())
        bad += breaches
        checked += seen
    assert not bad, "\n".join(bad)
    # The rule saw the real uses (Checkpoint in shoal/__init__, Records in the driver, codecs
    # in the task decorator...): it cannot pass because it looked at nothing.
    assert all(checked[p] >= 5 for p in STORAGE_PACKAGES), checked


def test_storage_packages_export_what_they_list_and_stay_light() -> None:
    code = ("import importlib, sys\n"
            f"for p in {STORAGE_PACKAGES!r}:\n"
            "    m = importlib.import_module('shoal._storage.' + p)\n"
            "    missing = [n for n in m.__all__ if not hasattr(m, n)]\n"
            "    assert not missing, (p, missing)\n"
            "heavy = ['torch', 'numpy', 'pandas', 'pyarrow', 'pydantic', 'safetensors', "
            "'psutil']\n"
            "print([m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_the_storage_door_rule_sees_each_way_around_a_door() -> None:
    probe = ("from shoal._storage.checkpoints.hashing import CHUNK\n"
             "from shoal._storage.records import _STATE_FIELDS\n"
             "import shoal._storage.codecs.compiler\n"
             "from shoal._storage import codecs\n"
             "codecs._cached_codec\n"
             "codecs.encode\n")
    bad, checked = _storage_door_breaches("_driver/probe.py", probe)
    assert len(bad) == 4 and checked == Counter(checkpoints=1, records=1, codecs=3), bad
    inside, _ = _storage_door_breaches("_storage/checkpoints/probe.py", probe.splitlines()[0])
    assert inside == []  # a package's own modules import each other directly


# Sub-packages with one door each: the rest of Shoal imports the names of the package's
# `__init__`'s `__all__`, never one of its modules (STYLE: a folder past ~15 modules gets
# sub-packages, each with one door). The local engine's `containers/` is `--containers` and
# `gangs/` its clustered calls; the runtime's `node/` is one node of a gang and `observe/` what
# a task process writes of itself. Each with the fewest imports of it the check must see (not
# vacuous).
SUB_PACKAGES = {"_engines/local/containers": 4, "_engines/local/gangs": 1, "_runtime/node": 8,
                "_runtime/observe": 20}


def _door_breaches(package: str, where: str, source: str) -> tuple[list[str], int]:
    """Imports in ``source`` (the file ``where``) around the door of the sub-package at
    ``package`` (a folder under src/shoal), and how many imports of the package were checked."""
    if where.startswith(f"{package}/"):
        return [], 0
    door = "shoal." + package.replace("/", ".")
    exported = _exported(package)
    bad: list[str] = []
    checked = 0
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            if name == door or name.startswith(door + "."):
                checked += 1
                if name != door or isinstance(node, ast.Import):
                    bad.append(f"{where}: imports {name} (use from {door} import NAME)")
                elif isinstance(node, ast.ImportFrom):
                    bad += [f"{where}: {a.name} is not in its __all__" for a in node.names
                            if a.name not in exported]
    return bad, checked


@pytest.mark.parametrize(("package", "users"), SUB_PACKAGES.items())
def test_a_sub_package_is_used_only_through_its_init(package: str, users: int) -> None:
    bad: list[str] = []
    checked = 0
    for path in _sources():
        breaches, seen = _door_breaches(package, path.relative_to(SRC).as_posix(),
                                        path.read_text())
        bad += breaches
        checked += seen
    assert not bad, "\n".join(bad)
    assert checked >= users
    door = "shoal." + package.replace("/", ".")
    probe = (f"from {door}.plan import RUNTIME\nimport {door}.oom\n"
             f"from {door} import _secret\nfrom {door} import {min(_exported(package))}\n")
    assert len(_door_breaches(package, "_driver/probe.py", probe)[0]) == 3


def test_a_door_leaves_out_the_entry_points_run_with_python_m() -> None:
    """A module run as ``python -m`` and imported by its package's door would be imported
    twice, once by the door and once by runpy as ``__main__`` (two copies of its classes)."""
    bad = []
    for package in SUB_PACKAGES:
        door = SRC / package / "__init__.py"
        imported = {f"{n.module}.{a.name}" if kind else n.module
                    for n in ast.walk(ast.parse(door.read_text()))
                    if isinstance(n, ast.ImportFrom) and n.module
                    for a in n.names for kind in (0, 1)}
        for path in (SRC / package).glob("*.py"):
            name = "shoal." + package.replace("/", ".") + "." + path.stem
            if 'if __name__ == "__main__":' in path.read_text() and name in imported:
                bad.append(f"{package}/__init__.py imports {path.stem}, a -m entry point")
    assert not bad, "\n".join(bad)


# Plugins: `shoal/plugins/<name>/` is a plugin's public, Flyte-shaped surface (configs,
# decorators) over Shoal's public API, `_api` and `_spec`; `_plugins/<name>/` its engine-side
# parts, registered in `shoal._plugins` by config type. The two meet only in that registry:
# the surface never imports an engine, the runtime, the store or `_plugins`; nothing outside
# `_plugins/` imports a plugin's parts (the registry's lazy factory loads them); the registry
# imports only errors; engines never import `shoal.plugins`.
SURFACE_MAY_IMPORT = {"_api", "_spec", "errors", "io", "clustered", "report", "plugins"}


def _plugin_breaches(where: str, source: str) -> list[str]:
    bad = []
    for name in sorted(_imports_of(source, where)):
        parts = name.split(".")
        second = parts[1] if len(parts) > 1 else ""
        if where.startswith("plugins/") and second and second not in SURFACE_MAY_IMPORT and (
                second.startswith("_") or second == "cli"):
            bad.append(f"{where}: a plugin's surface imports {name}")
        if not where.startswith("_plugins/") and second == "_plugins" and len(parts) > 2:
            bad.append(f"{where}: imports {name}, a plugin's part (ask shoal._plugins.part_for)")
        if where == "_plugins/__init__.py" and name != "shoal.errors":
            bad.append(f"{where}: the registry imports {name}")
        if where.startswith("_engines/") and second == "plugins":
            bad.append(f"{where}: an engine imports {name} (find its part by the config type)")
    return bad


def test_plugins_and_their_engine_parts_meet_only_in_the_registry() -> None:
    assert (SRC / "plugins" / "__init__.py").is_file()
    assert (SRC / "_plugins" / "__init__.py").is_file()
    bad = [b for path in _sources()
           for b in _plugin_breaches(path.relative_to(SRC).as_posix(), path.read_text())]
    assert not bad, "\n".join(bad)


def test_the_plugin_rule_sees_each_breach() -> None:
    surface = ("from shoal import TaskEnvironment\nfrom shoal._api.task import Task\n"
               "from shoal._spec.env import EnvSpec\nfrom shoal.plugins.other import Cfg\n")
    assert _plugin_breaches("plugins/pytorch/__init__.py", surface) == []
    assert len(_plugin_breaches("plugins/pytorch/elastic.py",
                                "import shoal._engines.local.gangs.gang\n"
                                "from shoal import _plugins\nfrom shoal._runtime.node import rank\n"
                                )) == 3
    assert len(_plugin_breaches("_engines/local/gangs/gang.py",
                                "from shoal.plugins.pytorch import Elastic\n"
                                "from shoal._plugins.pytorch.local import part\n"
                                "from shoal._plugins import part_for\n")) == 2
    assert _plugin_breaches("_plugins/pytorch/local.py",
                            "from shoal._plugins.pytorch.neutral import x\n") == []
    assert len(_plugin_breaches("_plugins/__init__.py", "from shoal._spec import call\n")) == 1
