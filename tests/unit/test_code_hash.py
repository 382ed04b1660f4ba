"""Cache keys: the code part ignores comments, formatting, docstrings and decorators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shoal._spec.code import cache_key, code_hash


def _define(src: str) -> Callable[..., Any]:
    ns: dict[str, Any] = {}
    # exec'd functions have no source: hash them through a file-backed module instead.
    import importlib.util
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "m.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"m{abs(hash(src))}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ns.update(vars(mod))
    return ns["f"]  # type: ignore[no-any-return]


BASE = "def f(x):\n    return x + 1\n"


def test_comments_formatting_docstring_do_not_matter() -> None:
    h = code_hash(_define(BASE))
    assert code_hash(_define("def f(x):\n    # a comment\n    return (x +   1)\n")) == h
    assert code_hash(_define('def f(x):\n    """Doc."""\n    return x + 1\n')) == h
    assert code_hash(_define("def deco(g):\n    return g\n@deco\n" + BASE)) == h


def test_logic_matters() -> None:
    assert code_hash(_define(BASE)) != code_hash(_define("def f(x):\n    return x + 2\n"))


def test_key_parts() -> None:
    base = dict(task="t", code="c", signature="s", image="", inputs={"a": 1, "seed": 2})
    k = cache_key(**base)  # type: ignore[arg-type]
    assert cache_key(**{**base, "inputs": {"a": 1, "seed": 3}}) != k  # type: ignore[arg-type]
    assert cache_key(**{**base, "inputs": {"a": 1, "seed": 3}},  # type: ignore[arg-type]
                     ignored_inputs=("seed",)) == cache_key(**base, ignored_inputs=("seed",))  # type: ignore[arg-type]
    assert cache_key(**base, version="v1") == cache_key(**{**base, "code": "other"},  # type: ignore[arg-type]
                                                        version="v1")
    assert cache_key(**base, salt="x") != k  # type: ignore[arg-type]
    assert cache_key(**{**base, "image": "img:abc"}) != k  # type: ignore[arg-type]
