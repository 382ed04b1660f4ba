"""A forked rank imports nothing of Shoal's before the user's module: whatever `rank.run_rank`
imports as it starts is already in the zygote (`zygote.PREIMPORTS`; Shoal's entries imported
here, torch's left to the zygote's own tests), and importing them starts no thread (a thread
would make forking the zygote unsafe).

Each module left out costs every rank of every start its import after the fork (~0.17 s a
rank for the loader, codecs and store on 2 busy cores), which a gang restart pays again."""

from __future__ import annotations

import os
import subprocess
import sys

_PROGRAM = """
import ast, importlib, inspect, sys, textwrap
from shoal._runtime.node import zygote
for name in zygote.PREIMPORTS:
    if name.startswith("shoal."):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:  # a state dict's modules need torch, as ranks do
            if e.name != "torch":
                raise
from shoal._runtime import forks
print("THREADS", forks.os_threads())
from shoal._runtime.node import rank
tree = ast.parse(textwrap.dedent(inspect.getsource(rank.run_rank)))
named = sorted({n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module})
print("NAMED", len(named))
print("MISSING", " ".join(m for m in named if m not in sys.modules) or "-")
"""


def test_what_run_rank_imports_is_preimported_without_threads() -> None:
    out = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(x.split(" ", 1) for x in out.stdout.splitlines())
    assert lines["THREADS"] == "1"
    assert int(lines["NAMED"]) >= 5  # the loader, reports, codecs, blobs, call_io, store
    assert lines["MISSING"] == "-"


def test_the_preimports_are_frozen_out_of_the_collector() -> None:
    """A forked child's full collection walks nothing the zygote or template imported."""
    program = ("import gc; from shoal._runtime import forks; before = gc.get_freeze_count(); "
               "why = forks.preimport(('json', 'shoal')); "
               "print(repr(why), before, gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    why, before, after = out.stdout.split()
    assert why == "''" and int(after) > int(before) + 10_000
