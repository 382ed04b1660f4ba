"""Load the user's file and find a task in it, the same way in every process.

The file is imported under a module name derived from its stem (never ``__main__``, so a
script's ``if __name__ == "__main__":`` block does not run again in a worker), with its folder
on ``sys.path`` as ``python file.py`` would have it.

A process that forks others (the node's rank zygote) may `precompile` the file and the other
modules of its folder first: each forked process then imports them from those code objects
instead of compiling them again (with ``PYTHONDONTWRITEBYTECODE``, or a folder it cannot
write, no bytecode is cached, so every process of every start compiled every one: ~8 ms a rank
for the pretrain example's four files). A file whose modification time or size has changed
since is compiled from its source as usual. Compiling runs none of the user's code.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import linecache
import os
import re
import sys
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from shoal._runtime import task_registry
from shoal._runtime.task_registry import LoadableTask
from shoal._runtime.tracebacks import caret_line, innermost_user_frame
from shoal.errors import NotFoundError, SpecError, UserCodeError, UserError

_loaded: dict[str, ModuleType] = {}
# Source path -> (modification time in ns, size, code object), from `precompile`.
_compiled: dict[str, tuple[int, int, CodeType]] = {}
_PRECOMPILE_MAX = 4 * 1024 * 1024  # bytes of source compiled ahead, at most


class _PrecompiledLoader(importlib.machinery.SourceFileLoader):
    """Python's loader of a source file, which takes the code object `precompile` made when
    the file's modification time and size are still those it was compiled at."""

    def get_code(self, fullname: str) -> CodeType | None:
        path = self.get_filename(fullname)
        found = _compiled.get(path)
        if found is not None:
            try:
                st = os.stat(path)
            except OSError:
                st = None
            if st is not None and (st.st_mtime_ns, st.st_size) == found[:2]:
                return found[2]
        return super().get_code(fullname)


def precompile(code_file: str) -> int:
    """Compile ``code_file`` and the other ``.py`` files of its folder (up to 4 MiB of source,
    in name order), for this process's imports of them and those of every process forked from
    it after this; how many were compiled. A file that does not compile is left for its import
    to report."""
    folder = Path(code_file).expanduser().resolve().parent
    try:
        paths = sorted(folder.glob("*.py"))
    except OSError:
        return 0
    total = 0
    for path in paths:
        try:
            st = path.stat()
            total += st.st_size
            if total > _PRECOMPILE_MAX:
                break
            loader = _PrecompiledLoader(module_name_for(path), str(path))
            code = loader.source_to_code(path.read_bytes(), str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        _compiled[str(path)] = (st.st_mtime_ns, st.st_size, code)
    if _compiled and _finder_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _finder_hook)
    sys.path_importer_cache.pop(str(folder), None)  # a finder made before: made again
    return len(_compiled)


def _finder_hook(entry: str) -> importlib.machinery.FileFinder:
    """The finder of a precompiled folder on ``sys.path``: Python's own, with its source files
    loaded by `_PrecompiledLoader`; other entries are left to the next hook."""
    if not any(os.path.dirname(path) == entry for path in _compiled):
        raise ImportError("not a precompiled folder")
    machinery = importlib.machinery
    return machinery.FileFinder(
        entry, (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
        (_PrecompiledLoader, machinery.SOURCE_SUFFIXES),
        (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES))


def module_name_for(path: Path) -> str:
    stem = re.sub(r"\W", "_", path.stem)
    if stem.isidentifier() and stem not in sys.builtin_module_names:
        return stem
    return f"_shoal_{stem}"


def load_file(path: str | Path) -> ModuleType:
    """Import the user's file once per process."""
    resolved = Path(path).expanduser().resolve()
    key = str(resolved)
    if key in _loaded:
        return _loaded[key]
    if not resolved.is_file():
        raise NotFoundError(f"FILE={str(path)!r}: no such file. Fix: pass the path of a .py file "
                            "that defines your tasks")
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None) and \
            Path(main.__file__).resolve() == resolved:  # type: ignore[arg-type]
        _loaded[key] = main  # the script that called shoal.run() defines the tasks itself
        return main
    folder = str(resolved.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = module_name_for(resolved)
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) and \
            Path(existing.__file__).resolve() == resolved:  # type: ignore[arg-type]
        _loaded[key] = existing
        return existing
    spec = importlib.util.spec_from_file_location(
        name, resolved, loader=_PrecompiledLoader(name, key) if key in _compiled else None)
    if spec is None or spec.loader is None:
        raise SpecError("FILE", str(path), "is not an importable Python file", "pass a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        sys.modules.pop(name, None)
        if isinstance(e, SyntaxError):
            raise syntax_error(e) from e
        if isinstance(e, Exception) and not isinstance(e, UserError):
            raise import_error(e, resolved) from e
        raise  # Shoal's own errors (a bad TaskEnvironment) say what is wrong; Ctrl-C, exit
    _loaded[key] = module
    return module


def syntax_error(e: SyntaxError) -> UserCodeError:
    """``file:line: SyntaxError: msg``, the line, a caret under the column Python names."""
    where = f"{e.filename}:{e.lineno}" if e.lineno else str(e.filename)
    text = f"{where}: {type(e).__name__}: {e.msg}"
    if e.text:
        start = e.offset - 1 if e.offset else None
        end = getattr(e, "end_offset", None)
        if end is not None and getattr(e, "end_lineno", e.lineno) != e.lineno:
            end = None
        text += "\n" + caret_line(e.text, start, end - 1 if end else None)
    return UserCodeError(text)


def import_error(e: Exception, path: Path) -> UserCodeError:
    """An exception the user's file raised while it was imported: where (the innermost frame
    of the user's code), that line, and the fix."""
    frame = innermost_user_frame(e.__traceback__)
    head = f"{type(e).__name__}: {e}"
    if frame is None:
        text = f"{path}: {head}"
    else:
        text = f"{frame.filename}:{frame.lineno}: {head}"
        line = linecache.getline(frame.filename, frame.lineno or 0)
        if line.strip():
            # Columns exist from Python 3.11; like Python, no caret under a whole line.
            start, end = getattr(frame, "colno", None), getattr(frame, "end_colno", None)
            if start is None or end is None or line[start:end].strip() == line.strip() \
                    or getattr(frame, "end_lineno", frame.lineno) != frame.lineno:
                start = end = None
            text += "\n" + caret_line(line, start, end)
    if isinstance(e, ModuleNotFoundError) and e.name:
        text += (f"\nFix: install the package that provides {e.name!r} into the Python that "
                 f"runs the task ({sys.executable}), or correct the import")
    else:
        text += ("\nFix: correct that line (it runs when the file is imported); "
                 "`shoal --debug ...` shows the whole traceback")
    return UserCodeError(text)


# (file as given, task name) -> the task found there: a warm worker looks its task up per call.
_found: dict[tuple[str, str], Any] = {}


def find_task(path: str | Path, task_name: str) -> Any:
    """The task called ``task_name`` (``env.fn``, or a bare function name) in the file."""
    key = (str(path), task_name)
    found = _found.get(key)
    if found is None:
        found = _found[key] = _find_task(path, task_name)
    return found


def _find_task(path: str | Path, task_name: str) -> Any:
    module = load_file(path)
    tasks = {t.name: t for t in vars(module).values() if isinstance(t, LoadableTask)}
    for env in task_registry.ENVIRONMENTS.values():
        for t in env.tasks.values():
            if t.func.__module__ == module.__name__:
                tasks.setdefault(t.name, t)
    if task_name in tasks:
        return tasks[task_name]
    by_short = [t for t in tasks.values() if t.short_name == task_name or
                vars(module).get(task_name) is t]
    if len(by_short) == 1:
        return by_short[0]
    import difflib

    names = sorted({*tasks, *(t.short_name for t in tasks.values())})
    close = difflib.get_close_matches(task_name, names, n=1)
    fix = (f"did you mean {close[0]!r}?" if close
           else f"tasks in this file: {', '.join(names) or 'none'}")
    if len(by_short) > 1:
        fix = f"several environments have a task {task_name!r}: use one of " + ", ".join(
            t.name for t in by_short)
    raise NotFoundError(f"TASK={task_name!r}: no such task in {path}. Fix: {fix}")
