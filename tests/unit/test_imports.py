"""Helpers in their place, as a test: no module imports another's private names, and no two
modules import each other, unless a circle is closed for type checks only or through a lazy
import listed below with its reason.

A module is a file under `src/shoal` (a package is its ``__init__.py``). An import names the
module it loads: ``from shoal.a import b`` loads ``shoal.a.b`` when that is a module, else takes
``b`` from ``shoal.a``. That loading ``shoal.a.b`` also runs ``shoal/a/__init__.py`` is left
out: every module would otherwise sit in a circle with its package.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import shoal

SRC = Path(shoal.__file__).parent

# Lazy imports (inside a function) that close a circle on purpose, each with why. A circle
# through any other import fails; an entry here that no longer closes one fails too, so the
# list stays as short as the code allows.
LAZY_CIRCLES: dict[tuple[str, str], str] = {
    ("shoal._api.task", "shoal._api.override"):
        "TaskTemplate.override() makes an _Overridden, a subclass of TaskTemplate: the "
        "subclass's module needs its base defined first",
    ("shoal._storage.store", "shoal._storage.local"):
        "open_store's factory builds the store a URI's scheme names",
    ("shoal._storage.store", "shoal._storage.objstore"):
        "open_store's factory builds the store a URI's scheme names; obstore loads only for "
        "s3:// and gs://",
}
# Private names another module imports, until their module gives them a public name.
PRIVATE_IMPORTS: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Import:
    """One name an import statement brings in."""

    importer: str  # the module whose file holds the statement
    module: str  # the module it loads
    name: str | None  # the name it takes from that module; None: the module itself
    how: str  # "eager" (at import time), "lazy" (inside a function) or "typing" (TYPE_CHECKING)
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts}


def _type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _statements(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement in ``tree``, with how it runs."""
    def walk(node: ast.AST, how: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            mine = how
            if isinstance(node, ast.If) and _type_checking(node.test) and child in node.body:
                mine = "typing"
            elif (isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                  and how == "eager"):
                mine = "lazy"
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, mine
            yield from walk(child, mine)
    yield from walk(tree, "eager")


@functools.cache
def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text()) for name, path in _modules().items()}


def _imports(modules: dict[str, Path]) -> list[Import]:
    out = []
    for importer in sorted(modules):
        for node, how in _statements(_trees()[importer]):
            if isinstance(node, ast.Import):
                out += [Import(importer, a.name, None, how, node.lineno) for a in node.names
                        if a.name == "shoal" or a.name.startswith("shoal.")]
                continue
            base = node.module or ""
            if base != "shoal" and not base.startswith("shoal."):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append(Import(importer, sub, None, how, node.lineno) if sub in modules
                           else Import(importer, base, a.name, how, node.lineno))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_attributes(modules: dict[str, Path]) -> Iterator[str]:
    """``m._name`` where ``m`` is another Shoal module this file imported."""
    for importer in sorted(modules):
        tree = _trees()[importer]
        bound: dict[str, str] = {}
        for node, _ in _statements(tree):
            for a in node.names:
                module = (a.name if isinstance(node, ast.Import)
                          else f"{node.module}.{a.name}")
                if module in modules:
                    bound[a.asname or a.name] = module
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            dotted, value = [], node.value
            while isinstance(value, ast.Attribute):
                dotted.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                owner = bound.get(".".join([value.id, *dotted]))
                if owner is not None and owner != importer:
                    yield f"{importer}:{node.lineno} uses {owner}.{node.attr}"


def _circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_the_scan_reads_the_whole_package() -> None:
    modules = _modules()
    imports = _imports(modules)
    assert len(modules) > 100, len(modules)
    assert {i.how for i in imports} == {"eager", "lazy", "typing"}
    # What it must see: a lazy import, a type-checking import, a private name and a circle.
    assert ("shoal._api.task", "shoal._api.override", "lazy") in {
        (i.importer, i.module, i.how) for i in imports}
    assert any(i.how == "typing" and i.importer == "shoal._api.task" for i in imports)
    # (main has no private import left to see, so the statement walker is shown one)
    ((node, how),) = _statements(ast.parse("def f():\n    from shoal._api.io import _x\n"))
    assert how == "lazy" and isinstance(node, ast.ImportFrom) and _private(node.names[0].name)
    assert _circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]


def test_no_module_imports_another_modules_private_names() -> None:
    modules = _modules()
    found = {(i.importer, i.module, i.name): i.line for i in _imports(modules)
             if i.name is not None and _private(i.name) and i.module != i.importer}
    bad = [f"{a}:{line} imports {b}.{name}: give it a public name in its module, or move it "
           "where both use it" for (a, b, name), line in sorted(found.items())
           if (a, b, name) not in PRIVATE_IMPORTS]
    bad += list(_private_attributes(modules))
    stale = sorted(set(PRIVATE_IMPORTS) - set(found))
    assert not bad, "\n".join(bad)
    assert not stale, f"listed in PRIVATE_IMPORTS, no longer imported: {stale}"


def test_no_import_circle_but_the_listed_lazy_ones() -> None:
    modules = _modules()
    imports = [i for i in _imports(modules) if i.how != "typing" and i.module != i.importer]
    edges = {(i.importer, i.module) for i in imports}
    lazy = {(i.importer, i.module) for i in imports if i.how == "lazy"}
    eager = {(i.importer, i.module) for i in imports if i.how == "eager"}
    kept = edges - ((set(LAZY_CIRCLES) & lazy) - eager)
    bad = []
    for group in _circles(kept):
        inside = sorted({f"  {i.importer}:{i.line} imports {i.module} ({i.how})"
                         for i in imports if i.importer in group and i.module in group})
        bad.append(f"import circle {' <-> '.join(group)}:\n" + "\n".join(inside))
    assert not bad, ("\n".join(bad) + "\nMove the helper that both need where both can "
                     "import it, or import for type checks only (if TYPE_CHECKING:)")
    # Each listed lazy import is still there and still closes a circle.
    for edge in LAZY_CIRCLES:
        assert edge in lazy, f"{edge}: listed in LAZY_CIRCLES, no longer a lazy import"
        assert any(edge[0] in g and edge[1] in g for g in _circles(edges)), (
            f"{edge}: listed in LAZY_CIRCLES, closes no circle any more")
