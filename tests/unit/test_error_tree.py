"""The error tree drawn at the top of ``shoal/errors.py`` is the tree of the classes below it.

The drawing is what a user reads to choose what to catch, so it is parsed here and compared
with the real hierarchy: every error class drawn once, under its nearest Shoal base, and every
Flyte name in ``(Flyte: X)`` the same class as the one it is drawn beside.
"""

from __future__ import annotations

import re

import shoal.errors

_NODE = re.compile(r"^(?P<indent>[ │├└─]*?)(?:[├└]── )?(?P<name>[A-Z]\w*)\b(?P<rest>.*)$")


def _drawing() -> list[tuple[int, str, str]]:
    """(depth, class name, the text after it) for each line of the drawn tree."""
    doc = shoal.errors.__doc__ or ""
    block = doc.split("\n\n")[1]  # the docstring's first paragraph is its title line
    rows = []
    for line in block.splitlines():
        line = line[4:]  # the drawing is indented four spaces in the docstring
        if not line.strip(" │"):
            continue
        match = _NODE.match(line)
        if match is None:
            continue  # a continuation line of a node's description
        depth = len(match["indent"]) // 4 + (1 if "──" in line[:match.start("name")] else 0)
        rows.append((depth, match["name"], match["rest"]))
    return rows


def _parent(cls: type) -> type | None:
    """The nearest Shoal base of ``cls`` (its first base that is a ShoalError)."""
    for base in cls.__bases__:
        if issubclass(base, shoal.errors.ShoalError):
            return base
    return None


def test_the_drawn_tree_is_the_class_tree() -> None:
    rows = _drawing()
    assert rows and rows[0][:2] == (0, "ShoalError"), rows[:1]
    drawn: dict[str, str | None] = {}
    stack: list[str] = []
    for depth, name, _ in rows:
        assert name not in drawn, f"{name} is drawn twice in shoal/errors.py's tree"
        del stack[depth:]
        drawn[name] = stack[-1] if stack else None
        stack.append(name)
    real = {cls.__name__: (p.__name__ if (p := _parent(cls)) else None)
            for cls in vars(shoal.errors).values()
            if isinstance(cls, type) and issubclass(cls, shoal.errors.ShoalError)}
    missing = sorted(set(real) - set(drawn))
    stale = sorted(set(drawn) - set(real))
    assert not missing, f"errors drawn nowhere in shoal/errors.py's tree: {missing}; draw them"
    assert not stale, f"classes drawn in shoal/errors.py's tree that are gone: {stale}"
    moved = {n: f"drawn under {drawn[n]}, a subclass of {real[n]}"
             for n in real if drawn[n] != real[n]}
    assert not moved, moved


def test_the_flyte_names_drawn_are_aliases_of_their_class() -> None:
    aliases = {}
    for _, name, rest in _drawing():
        for flyte in re.findall(r"Flyte: (\w+)", rest):
            aliases[flyte] = name
    assert aliases, "the tree names Flyte 2's names of Shoal's errors"
    for flyte, name in aliases.items():
        assert getattr(shoal.errors, flyte) is getattr(shoal.errors, name), (flyte, name)
        assert flyte in shoal.errors.__all__, flyte
    # every alias in shoal.errors is drawn beside its class
    for exported in shoal.errors.__all__:
        value = getattr(shoal.errors, exported)
        if isinstance(value, type) and value.__name__ != exported:
            assert aliases.get(exported) == value.__name__, (
                f"{exported} (= {value.__name__}): write '(Flyte: {exported})' beside "
                f"{value.__name__} in shoal/errors.py's tree")
