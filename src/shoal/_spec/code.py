"""Identity of a task's code and of a call, for cache keys.

A cache key must not change when only comments, formatting, the docstring or the decorator's
arguments change, and must change when the function's logic does: so the key hashes the
function's AST (``ast.dump`` drops comments and layout) without its docstring and decorators.
Helpers the function calls are not followed; ``Cache(version=...)`` is the escape hatch for
changes the AST of the task body cannot see.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import textwrap
from collections.abc import Callable, Mapping
from typing import Any


def _strip(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        node.decorator_list = []
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return node


def code_hash(func: Callable[..., Any]) -> str:
    """sha256 of the function's normalised AST; falls back to its bytecode without source."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(source)
        fn = next(
            (n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
            None,
        )
        text = ast.dump(_strip(fn) if fn is not None else tree, include_attributes=False)
    except (OSError, TypeError, SyntaxError):
        code = func.__code__
        text = repr((code.co_code, code.co_consts, code.co_names))
    return hashlib.sha256(text.encode()).hexdigest()


def cache_key(
    *,
    task: str,
    code: str,
    signature: str,
    image: str,
    inputs: Mapping[str, Any],
    ignored_inputs: tuple[str, ...] = (),
    version: str | None = None,
    salt: str = "",
) -> str:
    """The key under which a call's outputs are cached (sha256 hex)."""
    kept = {k: v for k, v in inputs.items() if k not in ignored_inputs}
    material = {
        "task": task,
        "code": version if version is not None else code,
        "versioned": version is not None,
        "signature": signature,
        "image": image,
        "inputs": kept,
        "salt": salt,
    }
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
