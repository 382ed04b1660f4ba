"""One rank under NVIDIA Nsight Systems: ``nsys profile ... python -m shoal._runtime.node.rank``.

The node launcher starts a rank chosen by a ``tool="nsys"`` profile as this program instead of
forking it (torchrun, when it starts the ranks, starts every rank as this program, and the
ones not chosen become the plain rank at once through ``exec``). It runs the rank under
``nsys profile``, then ``nsys stats`` on the report, and leaves both with the run::

    <profile folder>/rank<r>.nsys-rep          the report (Nsight Systems' GUI opens it)
    <profile folder>/rank<r>.nsys-stats.txt    `nsys stats` of it, as text

and exits as the rank did. Window: ``seconds=(a, b)`` is nsys's ``--delay a --duration b-a``;
``steps=(A, B)`` with CUDA is a ``cudaProfilerApi`` capture range the rank opens and closes
at its step reports (`profiling.NsysSteps`); without CUDA nsys records the whole rank. A
``capture`` window is collected by the rank itself: it becomes the rank under ``nsys
launch`` (`nsys_session`), which writes each report from inside.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.log_files import redirect_output
from shoal._runtime.observe import (
    copy_to_store,
    exec_in_session,
    nsys_session,
    profile_folder,
    profiling,
    store_folder,
    write_stats,
)
from shoal._spec.profile import ProfileSpec

RANK_ARGV = (sys.executable, "-m", "shoal._runtime.node.rank")


def profile_argv(nsys: str, spec: ProfileSpec, out: Path, *, capture_steps: bool) -> list[str]:
    """``nsys profile`` around the rank, writing ``<out>.nsys-rep``."""
    argv = [nsys, "profile", "-o", str(out), f"--trace={','.join(spec.trace)}",
            "--force-overwrite=true"]
    if spec.sample is not None:
        argv.append(f"--sample={spec.sample}")
    if spec.seconds is not None:
        start, end = spec.seconds
        argv += [f"--delay={start:g}", f"--duration={end - start:g}"]
    elif capture_steps:
        argv += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    return [*argv, *RANK_ARGV]


def _exit_as(code: int) -> None:
    if code < 0:  # the rank died of a signal: so does this process, for the node's report
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def main() -> None:
    rank = int(os.environ[contract.TORCH_RANK])
    spec = profiling.setting()
    if spec is None or spec.tool != "nsys" or not spec.profiles_rank(rank):
        os.execv(RANK_ARGV[0], list(RANK_ARGV))
    node = NodeEnv.from_env()
    if node.rank_log_dir:  # nsys's own lines go with the rank's
        redirect_output(os.path.join(node.rank_log_dir, f"rank{rank}.log"))
    if spec.capture is not None:  # the rank collects what its code brackets, in a session
        exec_in_session(spec, RANK_ARGV, f"rank {rank}")
    nsys = shutil.which("nsys")
    if nsys is None:
        print(nsys_session.missing(f"rank {rank}"), file=sys.stderr, flush=True)
        sys.exit(1)
    folder = profile_folder(node.home, node.run, node.action, node.attempt,
                            node.restart_attempt, spec.window)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"rank{rank}"
    # A capture range only where the rank will see a GPU to open it; else the whole rank.
    capture = (spec.steps is not None and not contract.gpus_emulated()
               and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
               and Path("/dev/nvidiactl").exists())
    code = subprocess.call(profile_argv(nsys, spec, out, capture_steps=capture))
    report = out.with_suffix(".nsys-rep")
    kept = []
    if report.exists():
        kept = [write_stats(nsys, report, spec.stats)]
        if spec.keep_report:
            kept.insert(0, report)
        else:
            report.unlink()
        print(f"shoal: rank {rank} Nsight Systems " + ("report" if spec.keep_report else
              "stats (the report is not kept)") + f" written to {kept[0]}", file=sys.stderr,
              flush=True)
    copy_to_store(kept, node.store, store_folder(node.store, node.run, node.action,
                                                  node.attempt, node.restart_attempt,
                                                  spec.window))
    _exit_as(code)


if __name__ == "__main__":
    main()
