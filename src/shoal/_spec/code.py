"""Identity of a task's code and of a call, for cache keys.

A cache key must not change when only comments, formatting, docstrings or the task decorator's
arguments change, and must change when the logic the task runs does. So the code part hashes the
task function's AST (``ast.dump`` drops comments and layout) without its docstrings and
decorators, together with the user code it reaches (``user_code.py``): the helpers, classes and
constants of its own module that it uses, and the modules of the user's code folder (the folder
of the task's file) that it imports, followed through their own imports. The standard library,
installed packages and Shoal itself are not followed: the image pins them. ``Cache(version=...)``
replaces the code in the key (then the code is not hashed at all), for changes no AST shows.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import textwrap
from collections.abc import Callable, Mapping
from types import CodeType
from typing import Any

from shoal._spec import user_code
from shoal._spec.user_code import strip_docstrings


def _strip(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        node.decorator_list = []
    strip_docstrings(node)
    return node


def _code_text(code: CodeType) -> str:
    # nested code objects (inner functions, comprehensions) print with their memory address
    consts = tuple(_code_text(c) if isinstance(c, CodeType) else c for c in code.co_consts)
    return repr((code.co_code, consts, code.co_names))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def code_hash(func: Callable[..., Any]) -> str:
    """sha256 of the function's normalised AST and of the user code it reaches; without source,
    of its bytecode alone."""
    try:
        source = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(source)
        fn = next(
            (n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
            None,
        )
        node = _strip(fn if fn is not None else tree)
    except (OSError, TypeError, SyntaxError):
        return _sha256(_code_text(func.__code__))
    own = user_code.piece(node)
    reached = user_code.reached(func, own)
    if not reached:  # a self-contained task: its own AST alone
        return own.digest
    return _sha256(json.dumps({"task": own.digest, "reaches": reached}, sort_keys=True))


def _by_hash(literal: Any) -> Any:
    if isinstance(literal, dict) and literal.get("hash"):
        return {"hash": literal["hash"], "format": literal.get("format", "")}
    return literal


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
    reference_inputs: tuple[str, ...] = (),
) -> str:
    """The key under which a call's outputs are cached (sha256 hex). A File or Dir input
    (``reference_inputs``) with a hash counts by its hash and format alone: the same content, or
    the same cache key its user gave, hits wherever the object lies."""
    kept = {k: _by_hash(v) if k in reference_inputs else v
            for k, v in inputs.items() if k not in ignored_inputs}
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
