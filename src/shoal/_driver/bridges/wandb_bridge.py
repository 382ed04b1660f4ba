"""The Weights & Biases bridge: one W&B run per rank, grouped by the Shoal run's name.

Every rank (or plain call) of every attempt becomes a W&B run: ``group=<run>``,
``job_type=<action>.<attempt>``, ``name=rank<N>`` (``task`` for a plain call); with
``wandb:rank0``, rank 0 and plain calls only. Offline unless the user set ``WANDB_MODE``:
the runs are written under ``$SHOAL_HOME/runs/<run>/wandb`` (or ``$WANDB_DIR``), for
``wandb sync`` later. The project is ``$WANDB_PROJECT``, else ``shoal``.

wandb itself runs in a child process of the driver (`wandb_process`), fed the points as JSON
lines on a pipe: its service process, atexit hooks and signal handling stay out of the driver,
a W&B run per rank is one `wandb.init(reinit="create_new")` each (wandb's documented way to
hold several runs in one process), and a hung wandb is killed at the end instead of holding the
driver's exit.

A task's own W&B run wins over the bridge: a rank (or plain call) that holds a run of
``@wandb_init`` (`shoal.plugins.wandb`) claims its metrics stream (`claimed`), its
``shoal.log_metrics`` points go to that run, and the bridge skips the stream from then on, so
no point reaches W&B twice. Ranks without a run of their own (``run_mode="auto"``'s other
ranks) stay with the bridge.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from shoal._driver.bridges.follower import Bridge, Point, Stream
from shoal._runtime.observe import claimed

CLOSE_SECONDS = 8.0  # what wandb gets to finish its runs at the end before it is killed


def runs_folder(home: Path, run: str) -> Path:
    """Where the W&B runs of Shoal run ``run`` are written (W&B adds ``wandb/`` below):
    ``$WANDB_DIR`` when set, else the run's folder, for the bridge and for ``@wandb_init``."""
    return Path(os.environ.get("WANDB_DIR") or home / "runs" / run)


class WandbBridge(Bridge):
    name = "wandb"

    def __init__(self, home: Path, run: str, *, rank0_only: bool) -> None:
        self.run = run
        self.rank0_only = rank0_only
        self.folder = runs_folder(home, run)
        self.log_path = home / "runs" / run / "wandb-bridge.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._mode = "offline"
        self._streams: set[Stream] = set()  # those sent: a W&B run each
        self._home = home
        self._claimed: set[Stream] = set()  # those the task's own W&B run records

    def open(self) -> None:
        env = dict(os.environ)
        self._mode = env.setdefault("WANDB_MODE", "offline")
        env.setdefault("WANDB_SILENT", "true")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "shoal._driver.bridges.wandb_process"], env=env,
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)  # a Ctrl-C of the driver is not wandb's to handle
        self._send({"open": {"run": self.run, "dir": str(self.folder),
                             "project": env.get("WANDB_PROJECT") or "shoal"}})

    def write(self, stream: Stream, points: Sequence[Point]) -> None:
        if self.rank0_only and stream.rank not in (None, 0):
            return
        if stream in self._claimed or claimed(self._home, self.run, stream.action,
                                              stream.attempt, stream.rank, "wandb"):
            self._claimed.add(stream)
            return
        self._streams.add(stream)
        self._send({"stream": {"action": stream.action, "attempt": stream.attempt,
                               "rank": stream.rank}, "points": list(points)})

    def _send(self, message: dict[str, Any]) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None  # open() ran first
        try:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, ValueError) as e:
            raise RuntimeError(f"the wandb process ended (exit code {proc.poll()}); see "
                               f"{self.log_path}") from e

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()  # EOF: finish every W&B run and exit
        try:
            code = proc.wait(timeout=CLOSE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"wandb did not finish its runs within {CLOSE_SECONDS:g}s and "
                               f"was killed; see {self.log_path}") from None
        finally:
            if self._log is not None:
                self._log.close()
        if code != 0:
            raise RuntimeError(f"the wandb process exited with code {code}; see "
                               f"{self.log_path}")
        if self._mode == "offline" and self._streams:
            runs = self.folder / "wandb"
            print(f"shoal: W&B offline runs of run {self.run} are in {runs}; upload them with "
                  f"`wandb sync {runs}/offline-run-*`", file=sys.stderr, flush=True)
