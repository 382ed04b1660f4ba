"""Reading a script's PEP 723 block (``# /// script``), for ``Image.from_uv_script``.

    # /// script
    # requires-python = ">=3.11"
    # dependencies = ["torch", "numpy>=1.24"]
    # ///

The block is TOML in comment lines (``#`` alone, or ``# `` and text) between ``# /// script``
and ``# ///``. Every problem is a ``SpecError`` whose field names the file and the line, so an
editor can jump to it. ``requires-python`` is checked against the image's Python with the
specifier operators pip knows (``>=``, ``<``, ``==3.11.*``, ``~=`` and the rest), compared on
major.minor, which is all an image's Python names.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from shoal._api.image.checks import MIN_PYTHON, check_requirement
from shoal.errors import SpecError

__all__ = ["ScriptBlock", "check_requires_python", "pick_python", "read_script_block",
           "toml_module"]

_OPEN = re.compile(r"^# /// (?P<type>[a-zA-Z0-9-]+)\s*$")
_CLOSE = "# ///"
_KEYS = ("requires-python", "dependencies", "tool")
_TOML_AT = re.compile(r"\(at line (\d+)")
_SPEC = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*([0-9]+(?:\.[0-9]+)*)(\.\*)?\s*$")


@dataclass(frozen=True)
class ScriptBlock:
    dependencies: tuple[str, ...]
    requires_python: str | None
    line: int  # of the "# /// script" line, 1-based


def read_script_block(script: Path) -> ScriptBlock:
    """The ``script`` block of ``script``: its dependencies and requires-python."""
    where = f"from_uv_script({script})"
    if not script.is_file():
        raise SpecError(where, str(script), "does not exist" if not script.exists() else
                        "is not a file", "pass the script's path, e.g. __file__")
    lines = script.read_text(encoding="utf-8").splitlines()
    start, body = _find_block(lines, script)
    field = f"from_uv_script({script}:{start})"
    toml = toml_module(field)
    try:
        data = toml.loads("\n".join(body))
    except toml.TOMLDecodeError as e:
        at = _TOML_AT.search(str(e))
        # tomllib counts lines from the block's first; "at end of document" is its last.
        line = start + (int(at.group(1)) if at else len(body))
        raise SpecError(f"from_uv_script({script}:{line})", lines[line - 1].strip(),
                        f"is not valid TOML ({e})", "fix the line: the block is TOML "
                        "behind '# ', e.g. # dependencies = [\"torch\"]") from None
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise SpecError(field, unknown, "PEP 723 allows only requires-python, dependencies "
                        "and [tool] in a script block", "move tool settings under [tool.NAME]")
    deps = data.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise SpecError(f"{field}.dependencies", deps, "must be a list of strings",
                        'use dependencies = ["torch", "numpy>=1.24"]')
    for dep in deps:
        if "file://" in dep:
            raise SpecError(f"{field}.dependencies", dep, "a local project cannot be installed "
                            "from a script block", "copy it in with .with_source_folder(path) "
                            "and install it with .with_commands('pip install ./path')")
        try:
            check_requirement(dep)
        except SpecError as e:
            raise SpecError(f"{field}.dependencies", dep, e.rule, e.fix) from None
    requires = data.get("requires-python")
    if requires is not None and (not isinstance(requires, str) or not all(
            _SPEC.match(part) for part in requires.split(","))):
        raise SpecError(f"{field}.requires-python", requires, "must be version specifiers "
                        "such as \">=3.11\" or \">=3.10,<3.13\"", 'use requires-python = ">=3.11"')
    return ScriptBlock(tuple(deps), requires, start)


def toml_module(field: str) -> ModuleType:
    """tomllib (Python 3.11+), or its backport tomli on 3.10; a SpecError on ``field`` if
    neither is there."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:  # Python 3.10: tomllib's own backport, where installed
        import tomli
    except ImportError:
        raise SpecError(field, "TOML", "reading TOML needs Python 3.11's "
                        "tomllib, or the tomli package on 3.10", "pip install tomli") from None
    return tomli


def _find_block(lines: list[str], script: Path) -> tuple[int, list[str]]:
    start: int | None = None
    body: list[str] = []
    found: tuple[int, list[str]] | None = None
    for number, line in enumerate(lines, 1):
        if start is None:
            m = _OPEN.match(line)
            if m and m.group("type") == "script":
                if found is not None:
                    raise SpecError(f"from_uv_script({script}:{number})", line,
                                    "a script may have only one '# /// script' block",
                                    f"merge it into the block at line {found[0]}")
                start, body = number, []
            continue
        if line.rstrip() == _CLOSE:
            found, start = (start, body), None
        elif line == "#" or line.startswith("# "):
            body.append(line[2:])
        else:
            raise SpecError(f"from_uv_script({script}:{number})", line, "every line of a "
                            "'# /// script' block must start with '# ' (or be '#')",
                            "comment the line out, or close the block with '# ///'")
    if start is not None:
        raise SpecError(f"from_uv_script({script}:{start})", "# /// script",
                        "the block is never closed", "end it with a line '# ///'")
    if found is None:
        raise SpecError(f"from_uv_script({script})", str(script), "has no '# /// script' "
                        "block (PEP 723)", 'add one: # /// script, # dependencies = ["torch"], '
                        "# ///")
    return found


def check_requires_python(block: ScriptBlock, script: Path, version: str) -> None:
    """Refuse an image Python (``"3.11"``) that the block's ``requires-python`` excludes."""
    if block.requires_python is None:
        return
    if not _allows(block.requires_python, version):
        raise SpecError(f"from_uv_script({script}:{block.line}).requires-python",
                        block.requires_python, f"excludes the image's Python {version}",
                        "pass a python_version=... that it allows")


def pick_python(block: ScriptBlock) -> str:
    """This interpreter's "3.x" if ``requires-python`` allows it, else the oldest it allows."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if block.requires_python is None:
        return here
    candidates = [here] + [f"3.{minor}" for minor in range(MIN_PYTHON[1], 20)]
    for version in candidates:
        if _allows(block.requires_python, version):
            return version
    return here  # nothing allows it: check_requires_python says so, naming the block


def _allows(requires: str, version: str) -> bool:
    have = tuple(int(p) for p in version.split("."))
    for part in requires.split(","):
        m = _SPEC.match(part)
        if m is None or not _satisfies(have, m.group(1),
                                       tuple(int(p) for p in m.group(2).split("."))):
            return False
    return True


def _satisfies(have: tuple[int, ...], op: str, want: tuple[int, ...]) -> bool:
    # An image names major.minor, so compare on major.minor; a patch in the specifier only
    # matters for ">" (3.12 has patches past 3.12.1) and "~=" (which pins the series).
    a, b = have[:2], want[:2]
    if op == "~=":
        return a >= b and (a[:1] == b[:1] if len(want) == 2 else a == b)
    return {"==": a == b, "===": a == b, "!=": a != b, "<": a < b, "<=": a <= b,
            ">": a > b or (len(want) > 2 and a == b), ">=": a >= b}[op]
