"""The user's own code a task reaches, so that its cache key changes when that code does.

A task's result depends on more than its body. ``reached`` walks, without importing or running
anything, from the task function to:

- the names its body loads that are bound at the top level of the task's own module (helper
  functions, classes, constants): their statements, whose own names are followed the same way;
- the modules it imports (in its body, or as the module objects, functions, classes or instances
  its globals hold) whose file lies in the user's code folder: the folder of the task's file,
  which is what the code bundle packs and what the loader puts on ``sys.path``. Such a module
  counts whole, and its own imports of modules in that folder are followed in turn.

The standard library, installed packages (anything under ``site-packages``) and Shoal itself are
never followed: the image and the environment pin their versions. The task's own module counts
by the names the task reaches, never whole, so an unrelated function beside the task does not
touch its key.

Each piece counts by its AST without docstrings (``ast.dump`` without positions: comments and
formatting never count); a top-level function of the task's module also loses its decorators,
as the task itself does, so a sibling task's ``@env.task(retries=...)`` does not count. Pieces
are labelled by names and by paths relative to the code folder, never absolute paths, so the
same code gives the same result in every process and on every machine. Modules are found with
``importlib.machinery.PathFinder`` over ``sys.path`` (then over the code folder): it reads
directories only, while ``importlib.util.find_spec`` of a dotted name imports its parents.
Dynamic imports (``importlib.import_module(name)``) cannot be seen; ``Cache(version=...)`` is
the escape hatch for them.

A piece the walk cannot follow (a global whose own ``__getattr__`` raises, source that cannot
be parsed) is not left out quietly: it warns once per process, naming the piece and why, and
its label goes into the result as ``unfollowed:<label>`` (digest: the error's type). The key
then covers everything else the task reaches and never equals the key of a walk that followed
everything, so such a key can miss a change to that piece but never hit another key's result.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.machinery
import importlib.util
import inspect
import sys
import sysconfig
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

_INSTALLED_DIRS = frozenset({"site-packages", "dist-packages"})
_BLOCKS = tuple(t for t in (ast.If, ast.Try, getattr(ast, "TryStar", None), ast.With) if t)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)

# (level, module, names) of one import statement: ``from ..a import b, c`` is (2, "a", ("b", "c"))
_Import = tuple[int, str, tuple[str, ...]]


@dataclass(frozen=True)
class Piece:
    """One hashed piece of code and where it leads."""

    digest: str  # sha256 of its normalised AST
    loads: frozenset[str]  # the names it reads
    imports: tuple[_Import, ...]


def strip_docstrings(tree: ast.AST) -> None:
    """Drop the docstring of every module, class and function in ``tree`` (in place)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, *_DEFS)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]


def piece(node: ast.AST) -> Piece:
    """The digest, loaded names and imports of an already normalised AST."""
    text = ast.dump(node, include_attributes=False)
    loads: set[str] = set()
    imports: list[_Import] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            loads.add(n.id)
        elif isinstance(n, ast.Import):
            imports += [(0, a.name, ()) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            names = tuple(a.name for a in n.names if a.name != "*")
            imports.append((n.level, n.module or "", names))
    return Piece(hashlib.sha256(text.encode()).hexdigest(), frozenset(loads), tuple(imports))


# Per process, keyed by the sha256 of a file's bytes: an edited file is simply a new key.
_whole_modules: dict[str, Piece] = {}
_top_levels: dict[str, dict[str, tuple[Piece, ...]]] = {}


def _parse(data: bytes) -> ast.Module | None:
    try:
        return ast.parse(importlib.util.decode_source(data))
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _whole_module(path: Path) -> Piece:
    try:
        data = path.read_bytes()
    except OSError:
        return Piece("unreadable", frozenset(), ())
    key = hashlib.sha256(data).hexdigest()
    if key not in _whole_modules:
        tree = _parse(data)
        if tree is None:  # not Python source (an extension module): its bytes are its identity
            _whole_modules[key] = Piece(key, frozenset(), ())
        else:
            strip_docstrings(tree)
            _whole_modules[key] = piece(tree)
    return _whole_modules[key]


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, looking inside ``if``/``try``/``with`` blocks (import guards)."""
    for stmt in body:
        if isinstance(stmt, _BLOCKS):
            for name in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(stmt, name, []))
            for handler in getattr(stmt, "handlers", []):
                yield from _statements(handler.body)
        else:
            yield stmt


def _bound(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.ClassDef, *_DEFS)):
        return [stmt.name]
    targets = (stmt.targets if isinstance(stmt, ast.Assign) else
               [stmt.target] if isinstance(stmt, ast.AnnAssign | ast.AugAssign) else [])
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _top_level(path: Path) -> dict[str, tuple[Piece, ...]]:
    """Each name bound at the top of the module in ``path`` -> the statements that bind it."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    key = hashlib.sha256(data).hexdigest()
    if key not in _top_levels:
        tree = _parse(data)
        found: dict[str, list[Piece]] = {}
        for stmt in _statements(tree.body if tree else []):
            names = _bound(stmt)
            if not names:
                continue
            if isinstance(stmt, _DEFS):
                stmt.decorator_list = []
            strip_docstrings(stmt)
            p = piece(stmt)
            for name in names:
                found.setdefault(name, []).append(p)
        _top_levels[key] = {k: tuple(v) for k, v in found.items()}
    return _top_levels[key]


@functools.cache
def _environment_dirs() -> tuple[Path, ...]:
    """Where the interpreter's own and installed code lives, and Shoal's package."""
    paths = sysconfig.get_paths()
    dirs = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")
            if paths.get(k)}
    dirs.add(Path(__file__).resolve().parents[1])
    return tuple(sorted(dirs))


def _module_of(value: object) -> str | None:
    """The module a global's value comes from: itself, or where its function or class lives."""
    if isinstance(value, ModuleType):
        return value.__name__
    # a user object's own __getattr__ runs here; what it raises is the walk's to report
    obj = inspect.unwrap(value) if callable(value) else value  # type: ignore[arg-type]
    name = (obj.__module__ if isinstance(obj, type) or inspect.isroutine(obj)
            else type(obj).__module__)
    return name if isinstance(name, str) else None


def _absolute(level: int, module: str, package: str) -> str | None:
    if level == 0:
        return module or None
    try:
        return importlib.util.resolve_name("." * level + module, package)
    except (ImportError, ValueError):
        return None


class _Walk:
    def __init__(self, root: Path, task_file: Path, module: str, package: str,
                 globals_: Mapping[str, Any], task_name: str) -> None:
        self.root, self.task_file, self.module, self.package = root, task_file, module, package
        self.globals = globals_
        self.task = f"{module}.{task_name}"
        self.top_level = _top_level(task_file)
        self.parts: dict[str, str] = {}
        self.todo: list[tuple[bool, str]] = []  # (is a module name, name)
        self.seen: set[tuple[bool, str]] = set()
        self.specs: dict[str, ModuleSpec | None] = {}

    def run(self, start: Piece) -> dict[str, str]:
        self.follow(start, self.package, own_module=True)
        while self.todo:
            item = self.todo.pop()
            if item not in self.seen:
                self.seen.add(item)
                is_module, name = item
                try:
                    if is_module:
                        self.visit_module(name)
                    else:
                        self.visit_name(name)
                except Exception as e:  # user code runs here (__getattr__): reported, marked
                    label = f"module:{name}" if is_module else f"name:{name}"
                    what = f"module {name}" if is_module else f"{self.module}.{name}"
                    unfollowed(self.parts, label, self.task, what, e)
        return self.parts

    def follow(self, p: Piece, package: str, *, own_module: bool) -> None:
        if own_module:
            self.todo += [(False, n) for n in sorted(p.loads)]
        for level, module, names in p.imports:
            base = _absolute(level, module, package)
            if base is not None:
                # ``from pkg import x``: x may be a submodule; if it is not, it is not found
                self.todo += [(True, base), *((True, f"{base}.{n}") for n in names)]

    def visit_name(self, name: str) -> None:
        if name not in self.globals:
            return  # a builtin or a local
        pieces = self.top_level.get(name, ())
        if pieces:
            self.parts[f"name:{name}"] = ",".join(p.digest for p in pieces)
        for p in pieces:
            self.follow(p, self.package, own_module=True)
        module = _module_of(self.globals[name])
        if module is not None and module != self.module:
            self.todo.append((True, module))

    def visit_module(self, name: str) -> None:
        if name == "shoal" or name.startswith("shoal.") or name in sys.builtin_module_names:
            return
        spec = self.find(name)
        path = self.user_file(spec.origin) if spec is not None and spec.has_location else None
        if spec is None or path is None:
            return
        label = f"module:{path.relative_to(self.root).as_posix()}"
        if label in self.parts:
            return
        p = _whole_module(path)
        self.parts[label] = p.digest
        package = name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
        self.follow(p, package, own_module=False)

    def find(self, name: str) -> ModuleSpec | None:
        """The spec of ``name`` without importing anything; submodules only of user packages."""
        if name not in self.specs:
            spec: ModuleSpec | None = None
            try:
                loaded = sys.modules.get(name)
                parent = name.rpartition(".")[0]
                if loaded is not None:
                    spec = getattr(loaded, "__spec__", None)
                elif not parent:
                    finder = importlib.machinery.PathFinder
                    spec = finder.find_spec(name) or finder.find_spec(name, [str(self.root)])
                else:
                    outer = self.find(parent)
                    where = outer.submodule_search_locations if outer is not None else None
                    if where and all(self.inside(Path(w)) for w in where):
                        spec = importlib.machinery.PathFinder.find_spec(name, list(where))
            except (ImportError, ValueError, OSError):
                spec = None
            self.specs[name] = spec
        return self.specs[name]

    def inside(self, path: Path) -> bool:
        """Whether ``path`` is the user's code: in the code folder, not installed code."""
        path = path.resolve()
        if not path.is_relative_to(self.root):
            return False
        if _INSTALLED_DIRS & set(path.relative_to(self.root).parts):
            return False
        return not any(path.is_relative_to(d) for d in _environment_dirs())

    def user_file(self, origin: str | None) -> Path | None:
        if not origin:
            return None
        path = Path(origin).resolve()
        # the task's own module counts by the names the task reaches (see visit_name), not whole
        if path == self.task_file or not path.is_file() or not self.inside(path):
            return None
        return path


_warned: set[tuple[str, str]] = set()  # (task, what) already reported in this process


def unfollowed(parts: dict[str, str], label: str, task: str, what: str,
               error: Exception) -> None:
    """Mark ``parts`` with a piece the walk could not follow (``label``: its name, the same in
    every process; ``what``: how the warning names it); say so once per process."""
    parts[f"unfollowed:{label}"] = type(error).__name__
    if (task, what) not in _warned:
        _warned.add((task, what))
        warnings.warn(f"the cache key of task {task} cannot follow {what} ({type(error).__name__}"
                      f": {error}); the key covers the rest of the code the task reaches, but "
                      f"code reached only through {what} does not count in it. Give the task "
                      "cache=shoal.Cache(version=...) to key it yourself", stacklevel=2)


def reached(func: Any, start: Piece) -> dict[str, str]:
    """Label -> digest of each piece of user code ``func`` reaches (``start`` is its own AST).

    Never raises: a piece that cannot be followed is marked ``unfollowed:<label>`` and warned
    about (`unfollowed`); source that is simply not there (a builtin, an exec'd function)
    leaves the task's own code as its whole key.
    """
    module = str(getattr(func, "__module__", None) or "")
    name = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", "?"))
    try:
        source_file = inspect.getsourcefile(func)
    except TypeError:  # a builtin or C function: no user source to walk
        return {}
    if source_file is None:
        return {}
    try:
        task_file = Path(source_file).resolve()
        globals_: Mapping[str, Any] = getattr(func, "__globals__", {})
        package = globals_.get("__package__") or module.rpartition(".")[0]
        walk = _Walk(task_file.parent, task_file, module, str(package), globals_, name)
        return walk.run(start)
    except Exception as e:  # the walk's own set-up on user objects: reported, marked
        parts: dict[str, str] = {}
        unfollowed(parts, "task", f"{module}.{name}", "the code it reaches", e)
        return parts
