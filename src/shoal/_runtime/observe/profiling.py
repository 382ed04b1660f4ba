"""torch.profiler on a rank, over the window a `shoal.Profile` names.

Off (no ``SHOAL_PROFILE``, or a rank not chosen) nothing is imported (no torch) and nothing
hooked: `profiling_scope` is an empty block. On, the window opens and closes on the thread that runs
the task body, because torch.profiler records the ops of the thread that started it:

- ``steps=(A, B)``: the metrics writer calls `RankProfiler.on_step` on each
  ``shoal.log_metrics(step=N)`` (a report of step N ends step N). A report of step A-2 starts
  the profiler in torch's warm-up for step A-1 (its start-up cost stays out of the window; the
  task's start does it for A <= 1), each later report is a ``prof.step()`` (so the trace has
  ``ProfilerStep#N`` spans numbered as the task numbers its steps), a report of step >= B
  closes it.
- ``seconds=(a, b)``: a timer thread sends this process `WINDOW_SIGNAL` at a and b seconds
  after the task started; Python runs the handler on the main thread, between bytecodes.

The trace (Chrome JSON with ``distributedInfo``, which HTA and Perfetto read) goes to
``$SHOAL_HOME/runs/<run>/profiles/<action>.<attempt>/r<restart>/<window>/rank<r>.json``, and to
the same path under ``<store>/runs/`` when the store is not this machine's disk (a pod's home is
gone with the pod). A window still open when the task ends is closed and written then.

With ``tool="nsys"`` the rank runs under Nsight Systems (`nsys_rank`), and a ``steps`` window
is nsys's capture range, opened and closed at the same step reports (`NsysSteps`). A
``capture`` window (the task body, or its ``nsys.range`` blocks) is collected from inside the
process, which runs in an nsys session (`nsys_session`), a plain task's worker too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shoal import _contract as contract
from shoal._runtime.observe.nsys_session import capture_scope
from shoal._spec.profile import ProfileSpec

# Real-time signals are not used by Python, torch or the usual libraries' handlers.
WINDOW_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2

_active: RankProfiler | None = None


def active() -> bool:
    """Whether this process is profiled (`shoal.profile_region` records then)."""
    return _active is not None


def profile_folder(home: str | Path, run: str, action: str, attempt: int, restart: int,
                   window: str) -> Path:
    return Path(home) / "runs" / run / "profiles" / f"{action}.{attempt}" / f"r{restart}" / window


def store_folder(store: str, run: str, action: str, attempt: int, restart: int,
                 window: str) -> str:
    from shoal._storage.store import join

    return join(store, "runs", run, "profiles", f"{action}.{attempt}", f"r{restart}", window)


def setting(environ: Any = None) -> ProfileSpec | None:
    """This process's profile setting, from the contract; None when off."""
    text = (os.environ if environ is None else environ).get(contract.PROFILE, "")
    if not text:
        return None
    from shoal._spec.profile import profile_from_text

    return profile_from_text(text, contract.PROFILE)


def copy_to_store(paths: list[Path], store: str, folder: str) -> None:
    """Put the files in the run's store folder, unless the store is this machine's disk
    (``file://``), where the home copy is already kept with the run."""
    if store.startswith("file://"):
        return
    from shoal._storage.store import join, open_store

    target = open_store(store)
    for path in paths:
        target.put_file(path, join(folder, path.name))


class RankProfiler:
    """One rank's torch.profiler, opened and closed at its window's edges."""

    def __init__(self, spec: ProfileSpec, folder: Path, rank: int,
                 store: str | None = None, store_uri: str = "") -> None:
        self.spec = spec
        self.folder = folder
        self.rank = rank
        self.store, self.store_uri = store, store_uri
        self.owner = threading.get_ident()
        self.prof: Any = None
        self.done = False
        self.last_step: int | None = None
        self._timer: threading.Thread | None = None
        self._stop_timer = threading.Event()
        self._handled = threading.Event()
        self._old_handler: Any = None

    # -- the window's edges ------------------------------------------------------------------
    def open(self, first_step: int = 0) -> None:
        """Start the profiler with the step that starts now; a step before the window is
        torch's warm-up (the profiler's start-up cost lands there, not in the window)."""
        if self.prof is not None or self.done:
            return
        import torch
        from torch.profiler import ProfilerAction, ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        options: dict[str, Any] = {}
        if self.spec.steps is not None:
            window = self.spec.steps[0]

            def schedule(step: int) -> ProfilerAction:  # with one, torch marks ProfilerStep#N
                return ProfilerAction.WARMUP if step < window else ProfilerAction.RECORD

            options["schedule"] = schedule
        self.prof = profile(activities=activities, record_shapes=self.spec.record_shapes,
                            with_stack=self.spec.with_stack, **options)
        self.prof.step_num = first_step  # the first ProfilerStep# is the task's own step
        self.prof.start()

    def close(self) -> None:
        if self.prof is None:
            return
        prof, self.prof, self.done = self.prof, None, True
        prof.stop()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"rank{self.rank}.json"
        prof.export_chrome_trace(str(path))
        if self.store is not None:
            copy_to_store([path], self.store, self.store_uri)
        print(f"shoal: rank {self.rank} profile ({self.spec.window}) written to {path}",
              file=sys.stderr, flush=True)

    # -- steps -------------------------------------------------------------------------------
    def on_step(self, step: int) -> None:
        """Called by the metrics writer on each report; cheap when nothing changes."""
        if step == self.last_step or self.done or threading.get_ident() != self.owner:
            return
        self.last_step = step
        assert self.spec.steps is not None
        first, last = self.spec.steps
        if self.prof is None:
            if first - 2 <= step < last:  # one step early: the warm-up step
                self.open(first_step=step + 1)
        elif step >= last:
            self.close()
        else:
            self.prof.step_num = step  # step() numbers the next span step + 1
            self.prof.step()

    # -- seconds -----------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        if self.prof is None:
            self.open()
        else:
            self.close()
        self._handled.set()

    def _tick(self, edges: tuple[float, float]) -> None:
        main, started = self.owner, time.monotonic()
        for edge in edges:
            if self._stop_timer.wait(max(0.0, started + edge - time.monotonic())):
                return
            self._handled.clear()
            signal.pthread_kill(main, WINDOW_SIGNAL)
            # The end is signalled only once the start is handled: a handler never runs
            # inside the other (the main thread may be in a long op when the first arrives).
            while not self._handled.wait(0.05):
                if self._stop_timer.is_set():
                    return

    # -- the scope ---------------------------------------------------------------------------
    def __enter__(self) -> RankProfiler:
        global _active
        _active = self
        # torch.profiler's first start imports torch._dynamo, a slow import: paid now, before
        # the task runs, not inside the window.
        import torch._dynamo  # noqa: F401
        if self.spec.steps is not None:
            from shoal._runtime.observe import metrics

            writer = metrics.current()
            if writer is not None:
                writer.on_step = self.on_step
            if self.spec.steps[0] <= 1:
                self.open(first_step=0)
        elif self.spec.seconds is not None:
            start, end = self.spec.seconds
            self._old_handler = signal.signal(WINDOW_SIGNAL, self._on_signal)
            self._timer = threading.Thread(target=self._tick, args=((start, end),),
                                           name="shoal-profile-window", daemon=True)
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        from shoal._runtime.observe import metrics

        writer = metrics.current()
        if writer is not None:
            writer.on_step = None
        self._stop_timer.set()
        if self._timer is not None:
            self._timer.join(timeout=1)
            signal.signal(WINDOW_SIGNAL, self._old_handler or signal.SIG_DFL)
        self.close()  # a window the task outlived: what was recorded is written
        _active = None
        if not self.done:
            why = ("the task ended first; give a window that starts before it ends"
                   if self.spec.steps is None else
                   ("the task reported no step" if self.last_step is None else
                    f"the last step the task reported was {self.last_step}")
                   + "; report steps with shoal.log_metrics(..., step=N), or profile a time "
                   "window (seconds=a-b)")
            print(f"shoal: rank {self.rank} was not profiled: its window ({self.spec.window}) "
                  f"never opened: {why}", file=sys.stderr, flush=True)


class NsysSteps:
    """A ``steps`` window under Nsight Systems (the rank runs under `nsys_rank`): on CUDA, the
    rank opens and closes nsys's ``cudaProfilerApi`` capture range at its step reports and
    marks each step with an NVTX range ``ProfilerStep#N``."""

    def __init__(self, spec: ProfileSpec) -> None:
        assert spec.steps is not None
        self.first, self.last = spec.steps
        self.owner = threading.get_ident()
        self.open = False
        self.done = False
        self.last_step: int | None = None

    def _begin(self, step: int) -> None:
        import torch

        if not self.open:
            torch.cuda.profiler.start()  # type: ignore[no-untyped-call]
            self.open = True
        torch.cuda.nvtx.range_push(f"ProfilerStep#{step}")  # type: ignore[no-untyped-call]

    def _end(self) -> None:
        import torch

        torch.cuda.nvtx.range_pop()  # type: ignore[no-untyped-call]

    def on_step(self, step: int) -> None:
        if step == self.last_step or self.done or threading.get_ident() != self.owner:
            return
        self.last_step = step
        if self.open:
            self._end()
            if step >= self.last:
                self.close()
                return
            self._begin(step + 1)
        elif self.first - 1 <= step < self.last:
            self._begin(step + 1)

    def close(self) -> None:
        if self.open:
            import torch

            torch.cuda.profiler.stop()  # type: ignore[no-untyped-call]
        self.open, self.done = False, True


@contextlib.contextmanager
def nsys_steps(spec: ProfileSpec) -> Iterator[None]:
    import torch

    from shoal._runtime.observe import metrics

    writer = metrics.current()
    if not torch.cuda.is_available() or writer is None:
        yield  # nsys records the whole rank (see nsys_rank)
        return
    window = NsysSteps(spec)
    writer.on_step = window.on_step
    if window.first == 0:
        window._begin(0)
    try:
        yield
    finally:
        writer.on_step = None
        if window.open:
            window._end()
        window.close()


@contextlib.contextmanager
def profiling_scope(*, home: str, store: str, run: str, action: str, attempt: int,
                    restart: int, rank: int) -> Iterator[None]:
    """Around a rank's task body (inside its metrics scope): profiles it if asked to."""
    spec = setting()
    if spec is None or not spec.profiles_rank(rank):
        yield
        return
    folder = profile_folder(home, run, action, attempt, restart, spec.window)
    uri = store_folder(store, run, action, attempt, restart, spec.window)
    if spec.tool == "nsys" and spec.capture is not None:
        with capture_scope(spec, folder=folder, rank=rank,
                           keep=lambda paths: copy_to_store(paths, store, uri)):
            yield
        return
    if spec.tool == "nsys":
        with nsys_steps(spec) if spec.steps is not None else contextlib.nullcontext():
            yield
        return
    with RankProfiler(spec, folder, rank, store=store, store_uri=uri):
        yield


def check_profiles(envs: Any, *, local: bool, task: str | None = None) -> None:
    """Before a run starts: each profile's ranks exist, and its tool can run here. ``task``:
    these are the environments of that task's calls (a profile of its own, `nsys_profile`)."""
    import shutil

    from shoal.errors import SpecError

    for env in envs:
        spec: ProfileSpec | None = env.profile
        if spec is None:
            continue
        where = (f"profile of task {task!r}" if task is not None
                 else f"profile of environment {env.name!r}")
        world = env.cluster.world_size if env.cluster is not None else 1
        outside = [r for r in spec.ranks or () if r >= world]
        if outside:
            raise SpecError(f"{where}: ranks", list(spec.ranks or ()), f"must be < its world "
                            f"size ({world})", f"use ranks between 0 and {world - 1}, or all")
        if spec.tool == "torch" and env.cluster is not None and env.cluster.runtime == "jax":
            raise SpecError(f"{where}: tool", "torch", "torch.profiler records torch's ops, "
                            "and JaxRun ranks run JAX", "profile JAX ranks with tool=nsys, or "
                            "with jax.profiler inside the task")
        if spec.tool == "nsys" and env.cluster is None and spec.capture is None:
            raise SpecError(f"{where}: tool", "nsys", "Nsight Systems wraps the ranks of a "
                            "clustered task for a steps or seconds window; a plain task runs "
                            "in a warm worker process, which can only capture what its code "
                            "brackets", "capture its whole body (capture=task, or "
                            "shoal.plugins.nsight.nsys_profile), use tool=torch, or make it "
                            "a ClusteredTaskEnvironment(replicas=1)")
        if spec.tool == "nsys" and env.cluster is not None and env.cluster.runtime == "ray":
            raise SpecError(f"{where}: tool", "nsys", "a Ray gang's task body is the "
                            "driver of its cluster, not a rank Nsight Systems can wrap",
                            "profile the work inside the Ray tasks (e.g. nsys in their "
                            "runtime_env), or profile with tool=torch")
        if spec.tool == "nsys" and local and shutil.which("nsys") is None:
            raise SpecError(f"{where}: tool", "nsys", "needs the `nsys` executable on PATH "
                            "(NVIDIA Nsight Systems), which this machine lacks",
                            "install Nsight Systems (e.g. apt-get install nsight-systems-cli) "
                            "and put nsys on PATH, profile with tool=torch, or turn the "
                            "profile off (nsys_profile(enabled=False))")
