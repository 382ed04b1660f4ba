"""`loader.precompile`: the rank zygote compiles the task file and the modules beside it once;
a process forked after it imports them from those code objects, compiling nothing of them
(with PYTHONDONTWRITEBYTECODE every rank of every start compiled each again), and a file
changed since is compiled from its source, so an edit is never missed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_PROGRAM = """
import builtins, os, sys, time
from shoal._runtime import loader
folder = sys.argv[1]
print("PRECOMPILED", loader.precompile(os.path.join(folder, "tasks.py")))
compiled = []
real = builtins.compile
def spy(source, filename, *args, **kwargs):
    compiled.append(os.path.basename(str(filename)))
    return real(source, filename, *args, **kwargs)
builtins.compile = spy
with open(os.path.join(folder, "edited.py"), "a") as f:  # changed after it was compiled
    f.write("VALUE = 2\\n")
module = loader.load_file(os.path.join(folder, "tasks.py"))
print("VALUES", module.helper.VALUE, module.edited.VALUE, module.__spec__.loader.name)
print("COMPILED", " ".join(sorted(compiled)) or "-")
"""


def test_forked_imports_use_the_code_compiled_ahead_unless_the_file_changed(
        tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text("import helper\nimport edited\n")
    (tmp_path / "helper.py").write_text("VALUE = 1\n")
    (tmp_path / "edited.py").write_text("VALUE = 1\n")
    (tmp_path / "broken.py").write_text("def (\n")  # left for its own import to report
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["PRECOMPILED"] == "3"  # tasks, helper, edited; not broken
    assert lines["VALUES"] == "1 2 tasks"  # the edit is seen
    assert lines["COMPILED"] == "edited.py"  # and only the edited file was compiled again
