"""A stand-in for NVIDIA's ``nsys``, for the tests of Shoal's Nsight Systems support.

Nsight Systems is not installed on these machines (no NVIDIA driver either), so those tests
put this executable first on PATH instead (the ``stand_in_nsys`` fixture). It does what
Shoal relies on nsys for, and checks how it is asked:

- ``profile ... -o OUT ... python -m ...``: runs the command it wraps, writes ``OUT.nsys-rep``;
- ``launch --session-new=S ... PROGRAM``: opens session S (a file in its state folder), runs
  PROGRAM, whose ``SHOAL_NSYS_SESSION`` must name S (else it refuses, exit 3);
- ``start --session=S -o OUT`` / ``stop --session=S``: only in an open session, one
  collection at a time (else exit 1, as nsys refuses); ``stop`` writes ``OUT.nsys-rep``;
- ``stats ... REPORT``: prints a line naming REPORT.

Every call's argv is appended to a JSON-lines log, which the tests read.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SCRIPT = '''#!{python}
"""A stand-in for NVIDIA's `nsys`, written by a test (see tests/nsys_stand_in.py)."""
import json, os, subprocess, sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")


def option(name):
    return next(a.split("=", 1)[1] for a in args if a.startswith(name + "="))


if args[0] == "profile":
    out = args[args.index("-o") + 1]
    code = subprocess.call(args[args.index("-m") - 1:])
    with open(out + ".nsys-rep", "wb") as f:
        f.write(b"fake nsys report")
    sys.exit(code)
if args[0] == "launch":
    session = option("--session-new")
    if os.environ.get("SHOAL_NSYS_SESSION") != session:
        print("stand-in nsys: the program's SHOAL_NSYS_SESSION is not", session, file=sys.stderr)
        sys.exit(3)
    open(os.path.join({state!r}, session), "w").close()
    program = args[next(i for i, a in enumerate(args) if i and not a.startswith("--")):]
    sys.exit(subprocess.call(program))
if args[0] in ("start", "stop"):
    path = os.path.join({state!r}, option("--session"))
    if not os.path.exists(path):
        print("stand-in nsys: no such session", file=sys.stderr)
        sys.exit(1)
    with open(path) as f:
        collecting = f.read()
    if (args[0] == "start") == bool(collecting):
        print("stand-in nsys: a collection is" + (" already" if collecting else " not")
              + " running", file=sys.stderr)
        sys.exit(1)
    with open(path, "w") as f:
        f.write(args[args.index("-o") + 1] if args[0] == "start" else "")
    if args[0] == "stop":
        with open(collecting + ".nsys-rep", "wb") as f:
            f.write(b"fake nsys report")
    sys.exit(0)
if args[0] == "stats":
    print("stand-in nsys stats of", args[-1])
'''


def install(folder: Path) -> Path:
    """Write the stand-in as ``folder/bin/nsys``; returns the log its calls go to (the caller
    puts ``folder/bin`` first on PATH)."""
    (folder / "bin").mkdir(parents=True)
    (folder / "nsys-state").mkdir()
    log = folder / "nsys-calls.jsonl"
    exe = folder / "bin" / "nsys"
    exe.write_text(SCRIPT.format(python=sys.executable, log=str(log),
                                 state=str(folder / "nsys-state")))
    exe.chmod(0o755)
    return log


def path_with(folder: Path) -> str:
    return f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}"
