"""A worker or a rank in an Nsight Systems session, collecting what its code brackets.

A capture profile (``capture="task"``: the whole task body; ``"manual"``: each
``nsys.range(name)`` block; what ``shoal.plugins.nsight``'s ``nsys_profile`` makes) is not a
window that ``nsys profile`` can be told from outside: the process itself says when. So the
process runs under ``nsys launch`` (which starts a session and collects nothing yet) and
brackets each collection with ``nsys start -o <report>`` / ``nsys stop``, which writes that
report while the process goes on::

    worker or rank:  exec  nsys launch --session-new=shoal-<pid>-<random> ... python -m <same>
    the call:        nsys start --session=<session> -o <folder>/rank<r>[.<region>]
                     ... the body, or the region ...
                     nsys stop --session=<session>        -> rank<r>[.<region>].nsys-rep
                     nsys stats [--report ...] <report>   -> rank<r>[.<region>].nsys-stats.txt

The folder is the call's profile folder (`profiling.profile_folder`, window ``task`` or
``regions``), kept in the store as any profile is, so `shoal profile RUN` lists the reports.
A warm worker stays in its session across calls; each call collects into its own folder.

Collection is best effort once the task runs: a start refused (a pod without the capabilities
nsys needs) prints why in the task's log and the task goes on unprofiled. A missing ``nsys``
is refused before (the run's checks); a process that meets it here exits saying so.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from shoal import _contract as contract
from shoal._spec.profile import ProfileSpec
from shoal.errors import SpecError

# `nsys start` returns before collection is live; a short region would be missed without it.
ARM_SECONDS = 0.5
START_TRIES = 3
# What nsys prints when the process may not read GPU counters or trace the OS runtime.
_PERMISSION_HINTS = ("ERR_NVGPUCTRPERM", "insufficient privileges", "CAP_SYS_ADMIN")
PERMISSION_FIX = ("nsys needs CAP_SYS_ADMIN (and an unconfined AppArmor profile) for osrt "
                  "tracing and GPU counters: give the environment pod_template=shoal."
                  "PodTemplate().allow_nested_sandboxing(), set NVreg_RestrictProfilingToAdmin"
                  "Users=0 on the nodes' driver, or trace only ['cuda', 'nvtx']")


def missing(who: str) -> str:
    return (f"shoal: {who} is to run under Nsight Systems (tool=nsys) but `nsys` is not on "
            "PATH in this image; install Nsight Systems in it (e.g. apt-get install "
            "nsight-systems-cli), profile with tool=torch, or turn the profile off "
            "(nsys_profile(enabled=False))")


def wants_session(spec: ProfileSpec | None, rank: int) -> bool:
    """Whether this process must run inside an nsys session and is not yet."""
    return (spec is not None and spec.tool == "nsys" and spec.capture is not None
            and spec.profiles_rank(rank) and not os.environ.get(contract.NSYS_SESSION))


def launch_argv(nsys: str, spec: ProfileSpec, session: str,
                program: Sequence[str]) -> list[str]:
    """``nsys launch`` around ``program``: the session, with the trace and sample options
    (nsys takes them at launch, not at ``nsys start``)."""
    argv = [nsys, "launch", f"--session-new={session}", f"--trace={','.join(spec.trace)}"]
    if spec.sample is not None:
        argv.append(f"--sample={spec.sample}")
    return [*argv, *program]


def exec_in_session(spec: ProfileSpec, program: Sequence[str], who: str) -> NoReturn:
    """Replace this process with ``program`` under ``nsys launch``, in a session of its own:
    its pid and a random part name it (simulated nodes have pid namespaces of their own, so a
    pid alone may repeat on the machine)."""
    nsys = shutil.which("nsys")
    if nsys is None:
        print(missing(who), file=sys.stderr, flush=True)
        sys.exit(1)
    session = f"shoal-{os.getpid()}-{secrets.token_hex(4)}"
    os.environ[contract.NSYS_SESSION] = session
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(nsys, launch_argv(nsys, spec, session, program))


def write_stats(nsys: str, report: Path, reports: Sequence[str]) -> Path:
    """``nsys stats`` of ``report`` (``reports``: those; none: nsys's default set), as text
    beside it: ``<name>.nsys-stats.txt``."""
    stats = report.with_suffix(".nsys-stats.txt")
    argv = [nsys, "stats", "--force-export=true"]
    if reports:
        argv += ["--report", ",".join(reports)]
    with open(stats, "wb") as text:
        subprocess.call([*argv, str(report)], stdout=text, stderr=subprocess.STDOUT)
    return stats


def _run(argv: list[str]) -> tuple[int, str]:
    p = subprocess.run(argv, capture_output=True, text=True, errors="replace")
    return p.returncode, (p.stderr or p.stdout).strip()


class Session:
    """One call's collections in this process's session: a report per start/stop."""

    def __init__(self, nsys: str, name: str, spec: ProfileSpec, folder: Path, rank: int,
                 keep: Callable[[list[Path]], None]) -> None:
        self.nsys, self.name, self.spec = nsys, name, spec
        self.folder, self.rank, self.keep = folder, rank, keep
        self.seen: dict[str, int] = {}

    def out_for(self, region: str | None) -> Path:
        """``rank<r>`` for the whole body; ``rank<r>.<region>`` for a region, ``-2``, ``-3``
        ... for the same region again."""
        if region is None:
            return self.folder / f"rank{self.rank}"
        n = self.seen[region] = self.seen.get(region, 0) + 1
        return self.folder / (f"rank{self.rank}.{region}" + (f"-{n}" if n > 1 else ""))

    def start(self, out: Path) -> bool:
        """Begin collecting into ``<out>.nsys-rep``; False (and why, in the log) if nsys
        refused."""
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [self.nsys, "start", f"--session={self.name}", "-o", str(out),
                "--force-overwrite=true"]
        said = ""
        for attempt in range(START_TRIES):
            if attempt:
                time.sleep(0.5 * attempt)  # the session may not be registered yet
            code, said = _run(argv)
            if code == 0:
                time.sleep(ARM_SECONDS)
                return True
        self._warn(f"`nsys start` for {out.name} failed ({said[-400:]}); this part of the "
                   "task runs unprofiled", said)
        return False

    def stop(self, out: Path, *, stats: Sequence[str] | None = None,
             keep_report: bool | None = None) -> None:
        """End the collection; keep its report and stats with the run."""
        code, said = _run([self.nsys, "stop", f"--session={self.name}"])
        report = out.with_name(out.name + ".nsys-rep")
        if code != 0 or not report.exists():
            self._warn(f"`nsys stop` wrote no {report.name} ({said[-400:]})", said)
            return
        kept = [write_stats(self.nsys, report, self.spec.stats if stats is None else stats)]
        if self.spec.keep_report if keep_report is None else keep_report:
            kept.insert(0, report)
        else:
            report.unlink()
        self.keep(kept)
        print(f"shoal: rank {self.rank} Nsight Systems " + ("report" if len(kept) == 2 else
              "stats (the report is not kept)") + f" written to {kept[0]}", file=sys.stderr,
              flush=True)

    def _warn(self, message: str, said: str) -> None:
        fix = f"; {PERMISSION_FIX}" if any(h in said for h in _PERMISSION_HINTS) else ""
        print(f"shoal: rank {self.rank}: {message}{fix}", file=sys.stderr, flush=True)


# The manual-capture session of the running call, and the region open in this process (one
# at a time: a session collects one thing at a time).
_lock = threading.Lock()
_session: Session | None = None
_open: tuple[str, Path | None, Sequence[str] | None, bool | None] | None = None


def collecting() -> bool:
    """Whether a region entered now would start a collection (the call's capture is
    ``manual``)."""
    return _session is not None


def begin_region(name: str, stats: Sequence[str] | None = None,
                 keep_report: bool | None = None) -> None:
    """Enter ``nsys.range(name)``: collect into ``rank<r>.<name>`` when the call captures
    manually; else nothing. Regions do not nest, profiled or not, so code that runs here
    runs the same profiled."""
    global _open
    with _lock:
        if _open is not None:
            raise SpecError("nsys.range(name)", name, f"opens inside region {_open[0]!r}: an "
                            "Nsight Systems session collects one region at a time",
                            f"close {_open[0]!r} first, or label the inner part with "
                            f"nvtx.range({name!r})")
        session = _session
        out = session.out_for(name) if session is not None else None
        _open = (name, out, stats, keep_report)
    if session is not None and out is not None and not session.start(out):
        with _lock:
            _open = (name, None, stats, keep_report)


def end_region(name: str) -> None:
    global _open
    with _lock:
        opened, _open = _open, None
        session = _session
    if opened is None or opened[0] != name:
        return
    _, out, stats, keep_report = opened
    if session is not None and out is not None:
        session.stop(out, stats=stats, keep_report=keep_report)


@contextlib.contextmanager
def capture_scope(spec: ProfileSpec, *, folder: Path, rank: int,
                  keep: Callable[[list[Path]], None]) -> Iterator[None]:
    """Around a call's body on a chosen rank: the whole body collected (``task``), or the
    session handed to its regions (``manual``)."""
    global _session, _open
    name = os.environ.get(contract.NSYS_SESSION, "")
    nsys = shutil.which("nsys")
    if not name or nsys is None:
        print(f"shoal: rank {rank} is not in an Nsight Systems session"
              + ("" if nsys else " (`nsys` is not on PATH)") + "; it runs unprofiled",
              file=sys.stderr, flush=True)
        yield
        return
    session = Session(nsys, name, spec, folder, rank, keep)
    if spec.capture == "task":
        out = session.out_for(None)
        started = session.start(out)
        try:
            yield
        finally:  # a failed body is profiled too: its end is often the point
            if started:
                session.stop(out)
        return
    with _lock:
        _session = session
    try:
        yield
    finally:
        with _lock:
            _session = None
            _open = None  # a region the body never left (a generator not closed) ends here
