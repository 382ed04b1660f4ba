"""The node launcher: what runs on every node of a gang (a local process or a Kubernetes pod).

Driven only by the `NodeEnv` variables of the contract, it
1. becomes a child subreaper, so rank processes orphaned by a dying parent (torchrun) are
   re-parented here and can still be found and ended;
2. waits, bounded, until the master's address resolves (a pod may start before DNS has it);
3. starts the ranks (their command lines: `rank_start`): directly, with exactly the variables
   torchrun would give them (the local default: no elastic agent to start;
   benchmarks/results/*-gang-launch.md has what that saves), forked from the node's `zygote`
   (a process that imported torch and Shoal's rank runtime once); or through torchrun (its
   in-node restarts and c10d rendezvous), with a rendezvous id that includes the restart
   attempt;
4. watches them: the first rank that exits non-zero ends every other rank of the node at once
   (a peer blocked in a collective would otherwise wait for the timeout), and the launcher
   writes a node report (which rank, exit code or signal, when) and exits non-zero; under the
   local engine (`node_control`) it says so on its control socket instead and waits: told
   as the node begins to stop (unless the rank timed out in a collective, whose peers are
   recorded first), the engine stops the other nodes' ranks the same way meanwhile, and
   starts the gang's next restart in these same launchers, whose zygotes fork the new ranks
   at once;
5. on SIGTERM (preemption, gang stop) passes SIGTERM to the ranks, waits the grace period so
   they can checkpoint, then kills whatever is left;
6. samples every rank's CPU, memory and GPUs in a thread (`node_sampler`), written per rank.

Console script: ``shoal-node``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import posixpath
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from typing import Any, NoReturn

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.log_files import redirect_output
from shoal._runtime.node.node_control import Control
from shoal._runtime.node.node_sampler import NodeSampler, start_sampler, torchrun_ranks
from shoal._runtime.node.rank_start import nsys_profiled, rank_argv, start_zygote, torchrun_argv
from shoal._runtime.node.ray_node import RAYLET, RayNode
from shoal._runtime.node.zygote import Zygote

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def wait_for_master(node: NodeEnv) -> None:
    deadline = time.monotonic() + node.master_wait
    while True:
        try:
            socket.getaddrinfo(node.master_addr, node.master_port)
            return
        except socket.gaierror as e:
            if time.monotonic() > deadline:
                _die(f"the master address {node.master_addr!r} did not resolve within "
                     f"{node.master_wait:g}s ({e})")
            time.sleep(0.5)


class Node:
    def __init__(self, node: NodeEnv, zygote: Zygote | None = None) -> None:
        self.node = node
        self.zygote = zygote
        self.children: dict[int, int] = {}  # pid -> local rank (-1: torchrun)
        self.stopping = threading.Event()
        # Ends `watch_collectives` once set; a node never sets it (the watch ends with the
        # process), a test that starts the watch does.
        self.ended = threading.Event()
        self._diagnosing = threading.Lock()  # one hang report at a time
        self._diagnosed_at = float("-inf")  # monotonic time of the last one
        self.log = ""  # the node log this launcher writes to ("": the one it was started on)
        self.ray: RayNode | None = None  # a Ray gang's node: its raylet (`ray_node`)
        self.control: Control | None = None  # the engine's socket (the local engine only)
        self.keep_cluster = False  # this start's driver ending well leaves the raylet running
        self.driver_only = False  # this start runs a driver on the raylet already running
        self.caller: dict[str, str] = {}
        # SIGCHLD wakes `watch` through this pipe (set up by `main`, in the main thread).
        self.wakeup: int | None = None

    def renew(self, start: dict[str, Any]) -> None:
        """Become the node of the gang's next start (`node_control`): a new restart number,
        master port and log folder; the same process, zygote and PID namespace."""
        self.node = replace(self.node, restart_attempt=int(start["restart_attempt"]),
                            master_port=int(start["master_port"]),
                            rank_log_dir=str(start["rank_log_dir"]))
        # An elastic gang's start says where this node sits in it now: its rank among the
        # nodes left, their number, the master (the first of them) and why it started.
        topology: dict[str, Any] = {
            k: int(start[k]) for k in ("node_rank", "nnodes", "min_nnodes", "max_nnodes")
            if k in start}
        for key in ("master_addr", "start_cause"):
            if key in start:
                topology[key] = str(start[key])
        # A kept Ray cluster's next call: its driver is another call's (`driver_only`).
        if "attempt" in start:
            topology["attempt"] = int(start["attempt"])
        for key in ("action", "io", "checkpoint_uri"):
            if key in start:
                topology[key] = str(start[key])
        if topology:
            self.node = replace(self.node, **topology)
        os.environ.update(self.node.to_env())
        self.log = str(start["node_log"])
        sys.stdout.flush()
        sys.stderr.flush()
        redirect_output(self.log)
        # A kept Ray cluster's next call: a new driver on the raylet that still runs.
        self.keep_cluster = bool(start.get("keep_cluster"))
        # Where a Ray driver calls other tasks (the local engine's controller), if anywhere.
        self.caller = {k: str(start[k]) for k in ("controller", "caller") if k in start}
        self.driver_only = bool(start.get("driver_only")) and self.ray is not None
        self.children = {pid: r for pid, r in self.children.items()
                         if self.driver_only and r == RAYLET}
        self._diagnosed_at = float("-inf")
        self.stopping.clear()

    def start(self) -> None:
        base = dict(os.environ)
        n = self.node
        if n.runtime == "ray":
            self._start_ray(base)
            return
        if n.launch == "torchrun" and n.runtime == "torch":
            env = dict(base)
            if n.rdzv_backend == "c10d":
                # New workers must not reuse the dead attempt's store (pytorch/pytorch#135712).
                env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
            self.children[subprocess.Popen(torchrun_argv(n), env=env).pid] = -1
            return
        envs = {local_rank: {**base, **contract.torch_rank_env(n, local_rank)}
                for local_rank in range(n.nproc_per_node)}
        nsys = {r for r in envs if nsys_profiled(n, n.node_rank * n.nproc_per_node + r)}
        forked = [r for r in envs if r not in nsys]
        if self.zygote is not None and forked:
            pids = self.zygote.fork([envs[r] for r in forked], os.getcwd(), self.log)
            self.children.update((pid, r) for r, pid in zip(forked, pids, strict=True)
                                 if pid is not None)
        for local_rank, env in envs.items():
            if local_rank not in self.children.values():  # not forked: a new interpreter
                argv = [sys.executable, "-m", "shoal._runtime.node.nsys_rank"] \
                    if local_rank in nsys else rank_argv()
                self.children[subprocess.Popen(argv, env=env).pid] = local_rank

    def _start_ray(self, base: dict[str, str]) -> None:
        """The raylet (``ray start --block``) and, on the head, the driver: rank 0, which
        connects to the cluster before the body runs (`frameworks`)."""
        n = self.node
        if not self.driver_only or self.ray is None:
            self.ray = RayNode.for_node(n)
            self.ray.temp_dir.mkdir(parents=True, exist_ok=True)
            argv = self.ray.argv()
            print(f"shoal-node {n.node_rank}: Ray {self.ray.config.get('group')} node at "
                  f"{self.ray.address}: {' '.join(argv[2:])}", file=sys.stderr, flush=True)
            self.children[subprocess.Popen(argv, env=self.ray.environ(base)).pid] = RAYLET
        if n.node_rank != 0:
            return
        info = self.ray.info()
        self._say({"ray": info})
        self.ray.record(info)
        print(f"shoal-node 0: Ray dashboard {info['dashboard_url']}, clients "
              f"{info['client_address']}", file=sys.stderr, flush=True)
        env = self.ray.driver_environ(base, self.caller)
        self.children[subprocess.Popen(rank_argv(), env=env).pid] = 0

    def _say(self, message: dict[str, Any]) -> None:
        if self.control is not None:
            with contextlib.suppress(OSError):
                self.control.send(message)

    def rank_pids(self) -> dict[int, int]:
        """Local rank -> pid of each rank this launcher started (under torchrun: found)."""
        if -1 in self.children.values():
            return torchrun_ranks()
        return {local_rank: pid for pid, local_rank in self.children.items() if local_rank >= 0}

    def _family(self, spare: set[int]) -> list[Any]:
        """Every live process of the node but this one and the ``spare`` ones (and theirs)."""
        import psutil

        try:
            children = psutil.Process().children()
        except psutil.Error:
            return []
        family = []
        for child in children:
            if child.pid in spare:
                continue
            with contextlib.suppress(psutil.Error):
                family += [child, *child.children(recursive=True)]
        return family

    def signal_all(self, sig: int, spare: set[int] | None = None) -> None:
        """Signal every descendant but ``spare``. As the init of its own PID namespace,
        kill(-1) reaches exactly the node's processes (the kernel's view, whatever /proc
        shows); otherwise, or to spare the zygote, the process tree is walked (this launcher
        is a subreaper, so orphans stay in it)."""
        if os.getpid() == 1 and not spare:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, sig)
            return
        import psutil

        for p in self._family(spare or set()):
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)

    def stop(self, grace: float, *, keep_zygote: bool = False) -> None:
        """SIGTERM every descendant, wait up to ``grace``, SIGKILL what is left, reap all;
        ``keep_zygote``: all but the zygote, which forks the next start's ranks."""
        self.stopping.set()
        spare = self._zygote_pids() if keep_zygote else set()
        self.signal_all(signal.SIGTERM, spare)
        deadline = time.monotonic() + grace
        # Ray's own processes need no grace (a raylet given SIGTERM drains for up to 30 s):
        # once the driver, which may save a checkpoint, has ended, the rest is killed.
        ray_deadline = time.monotonic() + min(grace, 2.0) if self.ray is not None else None
        while time.monotonic() < deadline and self._left(spare):
            if ray_deadline is not None and time.monotonic() > ray_deadline \
                    and not self._driver_alive():
                break
            self._nap(0.01)  # a failed gang's restart waits for this
        self.signal_all(signal.SIGKILL, spare)
        deadline = time.monotonic() + 10  # the kernel ends SIGKILLed processes promptly
        while self._left(spare) and time.monotonic() < deadline:
            self._nap(0.01)
        if not keep_zygote and self.zygote is not None:
            self.zygote.close()
        if self.ray is not None:
            self.ray.finish()
            self.ray = None

    def _nap(self, seconds: float) -> None:
        """Sleep up to ``seconds``, less once a child has ended: its SIGCHLD wakes the pipe,
        even one that ended before this call (a stop sees its ranks gone as they go, not up to
        ``seconds`` later)."""
        if self.wakeup is None:
            time.sleep(seconds)
            return
        readable, _, _ = select.select([self.wakeup], [], [], seconds)
        if readable:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wakeup, 4096)

    def _driver_alive(self) -> bool:
        for pid, local_rank in self.children.items():
            if local_rank == 0:
                try:
                    os.kill(pid, 0)  # reaped by `_left` once it ended
                    return True
                except ProcessLookupError:
                    pass
        return False

    def _left(self, spare: set[int]) -> bool:
        self._reap_all()
        return bool(self._family(spare))

    def _reap_all(self) -> list[tuple[int, int]]:
        """Reap every child that has ended (ours or re-parented), without waiting."""
        reaped: list[tuple[int, int]] = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return reaped
            if not pid:
                return reaped
            reaped.append((pid, status))

    def watch(self, control: Control | None = None) -> int:
        """Wait for the ranks; the exit code of the node (0 also when the engine said stop)."""
        running = dict(self.children)
        while running:
            for pid, status in self._reap_all():
                if self.zygote is not None and pid == self.zygote.pid:
                    self.zygote.close()
                    self.zygote = None  # the next start's ranks start afresh
                    continue
                local_rank = running.pop(pid, None)
                if local_rank is None or self.stopping.is_set():
                    continue  # a re-parented orphan, or the node is being stopped
                code = os.waitstatus_to_exitcode(status)
                if local_rank == RAYLET and code == 0:
                    code = 1  # a raylet never ends on its own: the node is lost
                if self.ray is not None and local_rank == 0 and code == 0:
                    if self.keep_cluster:  # the engine keeps the cluster for a while
                        return 0
                    # The driver is done: so is the cluster (the engine ends the other
                    # nodes once this one says so). Nothing of it needs saving: a raylet
                    # given SIGTERM drains for up to 30 s, so it gets a short grace.
                    self.stop(grace=min(self.node.grace_period, 2.0), keep_zygote=True)
                    return 0
                if code != 0:
                    at = time.time()
                    if self._timed_out(local_rank, code):
                        # Its peers here are still alive: recorded before they are stopped.
                        self._report(local_rank, code, at)
                        self._diagnose_timed_out(local_rank)
                    else:
                        # Nothing to record first: the engine stops the other nodes while
                        # this one stops its own ranks and writes its report.
                        self._say({"failing": self.node.restart_attempt})
                        self.stopping.set()
                        self.signal_all(signal.SIGTERM, self._zygote_pids())
                        self._report(local_rank, code, at)
                    self.stop(grace=min(self.node.grace_period, 2.0), keep_zygote=True)
                    return 1
            if running and self._wait(control):
                return 0
        return 0

    def _wait(self, control: Control | None) -> bool:
        """Wait for a child to end or the engine to speak; whether it said stop (done)."""
        fds = [fd for fd in (self.wakeup, control.fileno() if control else None)
               if fd is not None]
        readable, _, _ = select.select(fds, [], [], 1.0)
        if control is not None and control.expires_at is not None \
                and time.time() > control.expires_at and 0 not in self.children.values():
            print(f"shoal-node {self.node.node_rank}: the kept Ray cluster's time is up; "
                  "stopping the node", file=sys.stderr, flush=True)
            self.stop(min(self.node.grace_period, 2.0))
            os._exit(0)
        if self.wakeup is not None and self.wakeup in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wakeup, 4096)
        if control is None or control.fileno() not in readable:
            return False
        control.receive()
        if control.closed:
            print("shoal-node: the engine closed the control socket; stopping the node",
                  file=sys.stderr, flush=True)
            self.stop(min(self.node.grace_period, 5.0))
            os._exit(1)
        grace = control.take_stop()
        if grace is None:
            return False
        self.stop(grace, keep_zygote=True)
        return True

    def diagnose(self, *, wait: bool = False, why: str = "") -> bool:
        """Record what every rank of this node is doing now (`hang`), one report at a time
        (``wait``: for the one being written, instead of skipping); False if skipped or
        failed. ``why`` goes into the node log with the time the report took."""
        if not self._diagnosing.acquire(timeout=10 if wait else 0):
            return False
        from shoal._runtime.node import hang

        started = time.monotonic()
        try:
            hang.write_report(self.node, self.rank_pids())
            self._diagnosed_at = time.monotonic()
        except Exception as e:  # a diagnosis must never keep the node from stopping
            print(f"shoal-node {self.node.node_rank}: the hang diagnosis failed: {e!r}",
                  file=sys.stderr, flush=True)
            return False
        finally:
            self._diagnosing.release()
        if why:
            print(f"shoal-node {self.node.node_rank}: {why}; recorded this node's ranks in "
                  f"{time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        return True

    def watch_collectives(self) -> None:
        """Record this node's ranks live once one has waited in a collective for
        `hang.early_at` of the collective timeout, before the timeout ends them. It runs
        here, beside the ranks, on every engine: an ask from the engine's own poll came too
        late on a busy machine."""
        from shoal._runtime.node import hang

        # When this node's ranks were last recorded (wall time): a wait that began before
        # then is the one recorded, even once its longest waiter has failed and the next
        # waiter's slightly later start shows (a second report then would see a dead rank).
        recorded_at = float("-inf")
        while not self.ended.wait(hang.POLL):
            if self.stopping.is_set() or not self.children:
                continue
            since = hang.waiting_since(self.node)
            if since is None or since <= recorded_at:
                continue
            now = time.time()
            waited = now - since
            if waited < hang.early_at(self.node.collective_timeout):
                continue
            # Not done (another report was being written, or this one failed): try again at
            # the next poll, while the timeout has not yet ended the wait.
            if self.diagnose(why=f"a rank has waited {waited:.1f} s in a collective") \
                    or waited >= self.node.collective_timeout:
                recorded_at = now

    def _timed_out(self, local_rank: int, code: int) -> bool:
        """Whether ``local_rank`` ended in a collective timeout: it raised one (its failure
        report says so) or NCCL's watchdog aborted it (SIGABRT). A rank ended by any other
        signal (killed, crashed) did not, and nothing is read to say so."""
        if local_rank < 0 or (code < 0 and code != -signal.SIGABRT):
            return False
        from shoal._runtime.node import hang

        n = self.node
        return hang.rank_timed_out(n, n.node_rank * n.nproc_per_node + local_rank, code)

    def _zygote_pids(self) -> set[int]:
        return {self.zygote.pid} if self.zygote is not None else set()

    def _diagnose_timed_out(self, local_rank: int) -> None:
        """A rank timed out in a collective: its peers here are still alive; record them,
        unless this node was recorded during this collective (all ranks alive then)."""
        n = self.node
        self._diagnosing.acquire(timeout=10)  # an early one may be under way
        self._diagnosing.release()
        if time.monotonic() - self._diagnosed_at > n.collective_timeout:
            self.diagnose(wait=True, why=f"local rank {local_rank} timed out in a collective")

    def _report(self, local_rank: int, code: int, at: float) -> None:
        """The node report of ``local_rank``'s end (``code``), which this launcher saw at
        wall time ``at``."""
        from shoal._runtime.observe import attempt_folder
        from shoal._storage.store import join, open_store

        n = self.node
        rank = n.node_rank * n.nproc_per_node + local_rank if local_rank >= 0 else None
        sig = signal.Signals(-code).name if code < 0 and -code in signal.valid_signals() \
            else None
        report = {"node": n.node_rank, "local_rank": local_rank if local_rank >= 0 else None,
                  "rank": rank, "exit_code": None if sig else code, "signal": sig,
                  "at": at}
        if local_rank == RAYLET:
            report["process"] = "raylet"
        what = (f"local rank {local_rank}" if local_rank >= 0 else
                "the raylet (ray start)" if local_rank == RAYLET else "torchrun")
        print(f"shoal-node {n.node_rank}: {what} exited with "
              f"{sig or f'exit code {code}'}; stopping the node", file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            open_store(n.store).put_bytes(
                join(attempt_folder(n), f"node-{n.node_rank}.json"), json.dumps(report).encode())


def _die(message: str) -> NoReturn:
    print(f"shoal-node: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def watch_lifeline(runner: Node, grace: float) -> None:
    """On the local engine, end the node when the engine dies (even by SIGKILL): the engine
    holds the write end of a pipe whose read end this process inherited; EOF means it's gone."""
    fd = os.environ.get(contract.LIFELINE_FD)
    if not fd:
        return

    def wait_for_eof() -> None:
        with contextlib.suppress(OSError):
            while os.read(int(fd), 1):
                pass
        print("shoal-node: the engine is gone; stopping the node", file=sys.stderr, flush=True)
        runner.stop(grace)
        os._exit(1)

    threading.Thread(target=wait_for_eof, name="shoal-lifeline", daemon=True).start()


def fetch_code(node: NodeEnv) -> NodeEnv:
    """On a pod, the user's code comes as a bundle from the object store: unpack it and point
    the contract (and so every rank) at the task file inside it."""
    uri = os.environ.get(contract.CODE_BUNDLE)
    if not uri:
        return node
    from shoal._storage.bundle import fetch

    # The pod names the file where the bundle's paths start (`<home>/code/<file>`, as the
    # driver pod reads it too); the bundle unpacks under a folder of its digest there.
    relative = posixpath.relpath(node.code_file, posixpath.join(node.home, "code"))
    path = str(fetch(uri, relative))
    os.environ[contract.CODE_FILE] = path
    return replace(node, code_file=path)


def main() -> None:
    node = fetch_code(NodeEnv.from_env())
    control = Control.from_env()
    if node.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"  # as torchrun does; before torch is loaded
    zygote = start_zygote(node, become_subreaper() or os.getpid() == 1)
    wait_for_master(node)
    runner = Node(node, zygote)
    runner.control = control

    sampler: NodeSampler | None = None

    def stop_and_exit(signum: int) -> None:
        try:
            runner.stop(node.grace_period)
            if sampler is not None:
                sampler.stop()
        except BaseException as e:  # the node must still end: the engine waits for it
            print(f"shoal-node {node.node_rank}: stopping failed: {e!r}", file=sys.stderr,
                  flush=True)
        finally:
            os._exit(128 + signum)

    def on_term(signum: int, frame: object) -> None:
        # Preemption or gang stop: give the ranks their grace period, then end them all.
        threading.Thread(target=stop_and_exit, args=(signum,), daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, lambda signum, frame: threading.Thread(  # the engine asks
        target=runner.diagnose, kwargs={"why": "the engine asked"}, name="shoal-hang",
        daemon=True).start())
    # `watch` waits in select(): a child's end wakes it through this pipe.
    wakeup_r, wakeup_w = os.pipe()
    for fd in (wakeup_r, wakeup_w):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wakeup_w, warn_on_full_buffer=False)
    runner.wakeup = wakeup_r
    watch_lifeline(runner, min(node.grace_period, 5.0))
    threading.Thread(target=runner.watch_collectives, name="shoal-collectives",
                     daemon=True).start()
    if control is not None:
        # Under the local engine even the first start waits for its word, given once every
        # node is ready (its zygote's imports done): the gang's ranks then start together.
        if runner.zygote is not None:
            runner.zygote.ready()
        control.send({"ready": True})
        first = control.next_start()
        if first is None:
            runner.stop(0.0)
            os._exit(0)
        runner.renew(first)
        control.start_heartbeat(float(first.get("heartbeat", 0)))
    while True:
        runner.start()
        sampler = start_sampler(runner.node, runner.rank_pids)
        code = runner.watch(control)
        if sampler is not None:
            sampler.stop()
            sampler = None
        if control is None:
            break
        # The gang may restart: this process, its zygote and its PID namespace stay.
        control.send({"ended": runner.node.restart_attempt, "code": code})
        start = control.next_start()
        if start is None:
            if runner.ray is not None:  # a kept Ray cluster's end
                runner.stop(min(node.grace_period, 2.0))
            break
        runner.renew(start)
    if runner.zygote is not None:
        runner.zygote.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
