"""Cache keys: the code part ignores comments, formatting, docstrings and decorators."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import inspect
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal._spec.code import _strip, cache_key, code_hash
from shoal._spec.user_code import piece, reached


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


# -- the user code a task reaches ---------------------------------------------------------
# Each project is written to a fresh folder and imported the way the loader does (folder on
# sys.path, the task module under its own name); afterwards every module of that folder leaves
# sys.modules and the folder leaves sys.path, so the next project may reuse the same names.

TASK = """\
import json

import corpus


def task(n: int) -> int:
    import tokens
    return corpus.build(n) + tokens.count(json.dumps(n))
"""
CORPUS = "import tokens\n\n\ndef build(n):\n    return tokens.count(str(n)) * 2\n"
TOKENS = "def count(text):\n    return len(text.split())\n"
PROJECT = {"pipeline.py": TASK, "corpus.py": CORPUS, "tokens.py": TOKENS,
           "unused.py": "def other():\n    return 1\n"}


def _load(folder: Path, task_file: str = "pipeline.py") -> Callable[..., Any]:
    name = f"task_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, folder / task_file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.task  # type: ignore[no-any-return]


@contextlib.contextmanager
def _project(files: dict[str, str]) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp()).resolve()
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if file and Path(file).resolve().is_relative_to(folder):
                del sys.modules[name]
        importlib.invalidate_caches()


def _hash(files: dict[str, str], **changes: str) -> str:
    with _project({**files, **changes}) as folder:
        return code_hash(_load(folder))


def _reaches(files: dict[str, str]) -> list[str]:
    with _project(files) as folder:
        func = _load(folder)
        return sorted(reached(func, piece(_strip(ast.parse(inspect.getsource(func)).body[0]))))


def test_imported_sibling_counts_by_its_ast() -> None:
    h = _hash(PROJECT)
    assert _hash(PROJECT) == h  # a new folder, the same code: no absolute paths in the hash
    assert _hash(PROJECT, **{"corpus.py": "# corpus\n" + CORPUS.replace("* 2", "*2  # x2")}) == h
    assert _hash(PROJECT, **{"corpus.py": '"""Doc."""\n' + CORPUS}) == h
    assert _hash(PROJECT, **{"corpus.py": CORPUS.replace("* 2", "* 3")}) != h


def test_modules_are_followed_through_their_imports() -> None:
    h = _hash(PROJECT)
    tokens = TOKENS.replace("split()", "split(',')")
    assert _hash(PROJECT, **{"tokens.py": tokens}) != h
    # still reached when only corpus imports it
    only_corpus = {**PROJECT, "pipeline.py": TASK.replace("    import tokens\n", "").replace(
        " + tokens.count(json.dumps(n))", "")}
    assert _hash(only_corpus) != _hash(only_corpus, **{"tokens.py": tokens})
    assert _reaches(only_corpus) == ["module:corpus.py", "module:tokens.py"]


def test_modules_not_imported_do_not_count() -> None:
    h = _hash(PROJECT)
    assert _hash(PROJECT, **{"unused.py": "def other():\n    return 2\n"}) == h
    assert _hash(PROJECT, **{"notes.txt": "anything"}) == h


def test_the_standard_library_and_shoal_are_not_followed() -> None:
    task = ("import json\nimport os.path\nimport shoal\nfrom collections import abc\n\n\n"
            "def task(n: int) -> int:\n    import email.mime.text\n    import shoal._spec.code\n"
            "    return len(json.dumps(n)) + len(os.path.sep) + len(abc.__name__)\n")
    assert _reaches({"pipeline.py": task}) == []
    own = ast.dump(_strip(ast.parse(task).body[-1]), include_attributes=False)
    assert _hash({"pipeline.py": task}) == hashlib.sha256(own.encode()).hexdigest()


def test_installed_packages_in_the_code_folder_are_not_followed() -> None:
    site = ".venv/lib/python3.11/site-packages"
    files = {"pipeline.py": "def task() -> int:\n    import vendored\n    return vendored.x\n",
             f"{site}/vendored.py": "x = 1\n"}
    with _project(files) as folder:
        sys.path.append(str(folder / site))
        try:
            assert code_hash(_load(folder)) == _hash({"pipeline.py": files["pipeline.py"]})
        finally:
            sys.path.remove(str(folder / site))


def test_helpers_of_the_same_module_count_and_the_rest_does_not() -> None:
    module = ("import dataclasses\n\nSCALE = 2\n\n\n"
              "@dataclasses.dataclass\nclass Box:\n    n: int\n\n\n"
              "def helper(n):\n    '''Doc.'''\n    return inner(n) * SCALE\n\n\n"
              "def inner(n):\n    return n + 1\n\n\n"
              "def unrelated():\n    return 0\n\n\n"
              "def task(n: int) -> int:\n    return helper(Box(n).n)\n")
    h = _hash({"pipeline.py": module})
    assert _hash({"pipeline.py": module.replace("return 0", "return 1")}) == h
    assert _hash({"pipeline.py": module.replace("'''Doc.'''", "# a comment")}) == h
    assert _hash({"pipeline.py": module.replace("n * SCALE", "n  *  SCALE")}) == h
    assert _hash({"pipeline.py": module.replace("* SCALE", "* SCALE + 1")}) != h
    assert _hash({"pipeline.py": module.replace("return n + 1", "return n + 2")}) != h
    assert _hash({"pipeline.py": module.replace("SCALE = 2", "SCALE = 3")}) != h
    assert _hash({"pipeline.py": module.replace("n: int\n", "n: float\n")}) != h


def test_a_sibling_task_counts_without_its_decorator() -> None:
    module = ("def deco(**kw):\n    return lambda f: f\n\n\n"
              "@deco(retries=1)\ndef child(n):\n    return n\n\n\n"
              "def task(n: int) -> int:\n    return child(n)\n")
    h = _hash({"pipeline.py": module})
    assert _hash({"pipeline.py": module.replace("retries=1", "retries=2")}) == h
    assert _hash({"pipeline.py": module.replace("return n\n", "return -n\n")}) != h


def test_objects_imported_from_a_sibling_lead_to_it() -> None:
    task = "from corpus import build\n\n\ndef task(n: int) -> int:\n    return build(n)\n"
    files = {**PROJECT, "pipeline.py": task}
    assert _reaches(files) == ["module:corpus.py", "module:tokens.py"]
    assert _hash(files) != _hash(files, **{"corpus.py": CORPUS.replace("* 2", "* 3")})


def test_packages_and_relative_imports() -> None:
    files = {"pipeline.py": "def task() -> int:\n    from lib import data\n    return data.x()\n",
             "lib/__init__.py": "",
             "lib/data.py": "from . import util\nfrom .more import y\n\n\ndef x():\n"
                            "    return util.z + y\n",
             "lib/util.py": "z = 1\n",
             "lib/more.py": "y = 2\n"}
    assert _reaches(files) == ["module:lib/__init__.py", "module:lib/data.py",
                               "module:lib/more.py", "module:lib/util.py"]
    assert _hash(files) != _hash(files, **{"lib/more.py": "y = 3\n"})


def test_circular_imports_terminate() -> None:
    files = {"pipeline.py": "import a\n\n\ndef task() -> int:\n    return a.f() + task()\n",
             "a.py": "import b\n\n\ndef f():\n    return b.g()\n",
             "b.py": "import a\nimport pipeline\n\n\ndef g():\n    return 1\n"}
    assert _reaches(files) == ["module:a.py", "module:b.py", "name:task"]
    assert _hash(files) != _hash(files, **{"b.py": files["b.py"].replace("1", "2")})


def test_an_edited_sibling_is_seen_in_the_same_process() -> None:
    with _project(PROJECT) as folder:
        func = _load(folder)
        h = code_hash(func)
        (folder / "tokens.py").write_text(TOKENS.replace("len(", "1 + len("))
        assert code_hash(func) != h


def test_the_hash_is_the_same_in_another_process() -> None:
    script = ("import importlib.util, sys\nsys.path.insert(0, sys.argv[1])\n"
              "spec = importlib.util.spec_from_file_location('pipeline', sys.argv[1] + "
              "'/pipeline.py')\nm = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(m)\nfrom shoal._spec.code import code_hash\n"
              "print(code_hash(m.task))\n")
    with _project(PROJECT) as folder:
        other = subprocess.run([sys.executable, "-c", script, str(folder)], check=True,
                               capture_output=True, text=True,
                               env={**os.environ, "PYTHONHASHSEED": "123"}).stdout.strip()
    assert other == _hash(PROJECT)


def test_a_function_without_source_hashes_the_same_everywhere() -> None:
    ns: dict[str, Any] = {}
    exec("def f(x):\n    return [y + 1 for y in x]\n", ns)
    h = code_hash(ns["f"])
    ns2: dict[str, Any] = {}
    exec("def f(x):\n    return [y + 1 for y in x]\n", ns2)
    assert code_hash(ns2["f"]) == h


def test_a_cache_version_skips_hashing_the_code() -> None:
    env = shoal.TaskEnvironment(f"codehash-{uuid.uuid4().hex[:8]}")

    def plain(n: int) -> int:
        return n

    versioned = env.task(cache=shoal.Cache(version="v1"))(plain)
    assert versioned.spec().code_hash == ""
    assert env.task(name="auto", cache="auto")(plain).spec().code_hash == code_hash(plain)


def test_file_and_dir_inputs_key_on_their_hash_not_their_place() -> None:
    """Flyte's rule: a File/Dir with a hash (its content's, or a key its user gave) is cached
    by that hash, wherever the object lies; without one, by the whole reference."""
    from shoal._spec.code import cache_key

    def key(f: dict[str, object]) -> str:
        return cache_key(task="t", code="c", signature="s", image="i", inputs={"f": f, "n": 1},
                         reference_inputs=("f",))

    a = {"path": "s3://b/data/1/a.txt", "name": "a.txt", "hash": "k1", "format": ""}
    b = {"path": "s3://b/data/2/b.txt", "name": "b.txt", "hash": "k1", "format": ""}
    assert key(a) == key(b)
    assert key(a) != key({**b, "hash": "k2"})
    unhashed = {"path": "s3://b/w/x", "name": "x", "hash": None, "format": ""}
    assert key(unhashed) != key({**unhashed, "path": "s3://b/w/y"})


# A global whose own __getattr__ raises: the walk cannot tell which module it comes from.
LAZY = """\
import os


class Lazy:
    def __call__(self, n):
        return n

    def __getattr__(self, name):
        if os.environ.get("LAZY_IS_BROKEN"):
            raise RuntimeError(f"lazy proxy has no {name} yet")
        raise AttributeError(name)


helper = Lazy()


def task(n: int) -> int:
    return helper(n)
"""


def test_what_the_walk_cannot_follow_warns_once_and_marks_the_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shoal._spec import user_code

    monkeypatch.setattr(user_code, "_warned", set())
    followed = _hash({"pipeline.py": LAZY})
    monkeypatch.setenv("LAZY_IS_BROKEN", "1")
    with _project({"pipeline.py": LAZY}) as folder:
        func = _load(folder)
        with pytest.warns(UserWarning) as caught:
            marked = code_hash(func)
            assert code_hash(func) == marked  # the same key again, and no second warning
    (warning,) = caught
    text = str(warning.message)
    assert ".helper" in text and "RuntimeError: lazy proxy has no __wrapped__ yet" in text
    assert "Cache(version=" in text
    assert marked != followed  # never the key of the walk that followed everything
    with pytest.warns(UserWarning, match="helper"):  # another module name: warned on its own
        assert _reaches({"pipeline.py": LAZY}) == ["name:Lazy", "name:helper",
                                                   "unfollowed:name:helper"]
