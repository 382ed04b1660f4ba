"""docs/architecture.md's module inventory is the tree: every module listed once, none that is gone.

The inventory is the section ``## Modules``; each module is one line
``- `PATH` — what it holds``, PATH relative to ``src/shoal``.
"""

from __future__ import annotations

import re
from pathlib import Path

import shoal

SRC = Path(shoal.__file__).parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
_LINE = re.compile(r"^- `(?P<path>[\w/]+\.py)` — \S")


def _section() -> list[str]:
    text = DOC.read_text()
    start = text.index("\n## Modules\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None].splitlines()


def _listed() -> list[str]:
    paths = []
    for line in _section():
        match = _LINE.match(line)
        if match:
            paths.append(match["path"])
        else:
            assert not line.startswith(("- ", "* ")), (
                f"docs/architecture.md, ## Modules: {line!r} is not a module line; "
                "write it as - `PATH` — what it holds (PATH relative to src/shoal)")
    return paths


def _modules() -> set[str]:
    return {p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")}


def test_every_module_is_listed_once_and_no_listed_module_is_gone() -> None:
    listed = _listed()
    twice = sorted({p for p in listed if listed.count(p) > 1})
    missing = sorted(_modules() - set(listed))
    gone = sorted(set(listed) - _modules())
    problems = []
    if missing:
        problems.append("modules not in docs/architecture.md's ## Modules; add a line each, "
                        "under its layer:\n" + "\n".join(f"- `{p}` — what it holds"
                                                        for p in missing))
    if gone:
        problems.append("lines of docs/architecture.md's ## Modules naming modules that are "
                        "gone from src/shoal; remove them or rename them to the module's new "
                        "path:\n" + "\n".join(f"- `{p}`" for p in gone))
    if twice:
        problems.append("modules listed twice in docs/architecture.md's ## Modules: "
                        + ", ".join(twice))
    assert not problems, "\n\n".join(problems)
