"""The node launcher: what runs on every node of a gang (a local process or a Kubernetes pod).

Driven only by the `NodeEnv` variables of the contract, it
1. becomes a child subreaper, so rank processes orphaned by a dying parent (torchrun) are
   re-parented here and can still be found and ended;
2. waits, bounded, until the master's address resolves (a pod may start before DNS has it);
3. starts the ranks: directly, with exactly the variables torchrun would give them (the local
   default: no elastic agent to start, ~2 s saved per node), or through torchrun (its in-node
   restarts and c10d rendezvous), with a rendezvous id that includes the restart attempt;
4. watches them: the first rank that exits non-zero ends every other rank of the node at once
   (a peer blocked in a collective would otherwise wait for the timeout), and the launcher
   writes a node report (which rank, exit code or signal, when) and exits non-zero;
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
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import NoReturn

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._runtime.node_sampler import NodeSampler, start_sampler, torchrun_ranks

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


def torchrun_argv(node: NodeEnv) -> list[str]:
    argv = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={node.nnodes}", f"--nproc-per-node={node.nproc_per_node}",
        f"--node-rank={node.node_rank}", f"--max-restarts={node.torch_max_restarts}",
        f"--rdzv-backend={node.rdzv_backend}", f"--rdzv-id={contract.rendezvous_id(node)}",
    ]
    if node.node_addr:  # what c10d tells the workers to dial instead of this node's hostname
        argv.append(f"--local-addr={node.node_addr}")
    if node.rdzv_backend == "c10d":
        # Every simulated node resolves the endpoint to itself; say which one hosts the store.
        is_host = 1 if node.node_rank == 0 else 0
        argv += [f"--rdzv-endpoint={node.master_addr}:{node.master_port}",
                 f"--rdzv-conf=is_host={is_host},join_timeout={int(node.master_wait)}"]
    else:
        argv += [f"--master-addr={node.master_addr}", f"--master-port={node.master_port}"]
    # Under Nsight Systems every rank starts as nsys_rank, which wraps the chosen ones.
    return [*argv, "-m", "shoal._runtime.nsys_rank" if nsys_profiled(node) else
            "shoal._runtime.rank"]


def rank_argv() -> list[str]:
    return [sys.executable, "-m", "shoal._runtime.rank"]


def nsys_profiled(node: NodeEnv, rank: int | None = None) -> bool:
    """Whether ``rank`` (any rank of the node: None) runs under ``nsys profile``: such ranks
    are started as `shoal._runtime.nsys_rank`, never forked."""
    if "tool=nsys" not in node.profile:
        return False
    from shoal._spec.profile import profile_from_text

    spec = profile_from_text(node.profile, contract.PROFILE)
    return rank is None or spec.profiles_rank(rank)


def preimport_torch() -> bool:
    """Import torch once here, so ranks forked from this process start with it loaded.

    Each rank would otherwise spend ~1.5 s of CPU importing torch, all at once: on a small
    machine that is most of a gang's start-up. Forking is safe here because this process has
    started no Python threads yet (the lifeline thread starts after the ranks) and torch
    starts its compute thread pools lazily. ``SHOAL_PREIMPORT=0`` turns it off.
    """
    if os.environ.get(contract.PREIMPORT, "1") == "0":
        return False
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    try:
        import torch
        import torch.distributed  # noqa: F401
    except Exception as e:
        print(f"shoal-node: could not pre-import torch ({e}); starting ranks afresh",
              file=sys.stderr, flush=True)
        return False
    # Not torch._dynamo, although the first optimizer and DDP() import it (~1 s of CPU per
    # rank): ranks forked after it was imported here deadlocked at exit in 6 of 8 runs (a gloo
    # worker thread waits for the GIL while the main thread, holding it, joins that thread as
    # DDP's reducer is freed); 0 of 8 without it. Measured with torch 2.13.
    return True


def fork_rank(rank_env: dict[str, str]) -> int:
    """Fork one rank from this (torch-loaded) process; the child runs the rank and exits."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.update(rank_env)
        from shoal._runtime import rank

        rank.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Node:
    def __init__(self, node: NodeEnv) -> None:
        self.node = node
        self.children: dict[int, int] = {}  # pid -> local rank (-1: torchrun)
        self.stopping = threading.Event()
        self._diagnosing = threading.Lock()  # one hang report at a time
        self._diagnosed_at = float("-inf")  # monotonic time of the last one

    def start(self) -> None:
        base = dict(os.environ)
        n = self.node
        if n.launch == "torchrun" and n.runtime == "torch":
            env = dict(base)
            if n.rdzv_backend == "c10d":
                # New workers must not reuse the dead attempt's store (pytorch/pytorch#135712).
                env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
            self.children[subprocess.Popen(torchrun_argv(n), env=env).pid] = -1
            return
        if n.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
            os.environ["OMP_NUM_THREADS"] = "1"  # as torchrun does; before torch is loaded
            base["OMP_NUM_THREADS"] = "1"
        forking = n.runtime == "torch" and preimport_torch()
        for local_rank in range(n.nproc_per_node):
            rank_env = contract.torch_rank_env(n, local_rank)
            if nsys_profiled(n, n.node_rank * n.nproc_per_node + local_rank):
                argv = [sys.executable, "-m", "shoal._runtime.nsys_rank"]
                self.children[subprocess.Popen(argv, env={**base, **rank_env}).pid] = \
                    local_rank
            elif forking:
                self.children[fork_rank(rank_env)] = local_rank
            else:
                self.children[subprocess.Popen(rank_argv(), env={**base, **rank_env}).pid] = \
                    local_rank

    def rank_pids(self) -> dict[int, int]:
        """Local rank -> pid of each rank this launcher started (under torchrun: found)."""
        if -1 in self.children.values():
            return torchrun_ranks()
        return {local_rank: pid for pid, local_rank in self.children.items()}

    def signal_all(self, sig: int) -> None:
        """Signal every descendant. As the init of its own PID namespace, kill(-1) reaches
        exactly the node's processes (the kernel's view, whatever /proc shows); otherwise the
        process tree is walked (this launcher is a subreaper, so orphans stay in it)."""
        if os.getpid() == 1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, sig)
            return
        import psutil

        try:
            family = psutil.Process().children(recursive=True)
        except psutil.Error:
            family = []
        for p in family:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)

    def stop(self, grace: float) -> None:
        """SIGTERM every descendant, wait up to ``grace``, SIGKILL what is left, reap all."""
        self.stopping.set()
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self._reap(block=False) is not None:
            time.sleep(0.05)
        self.signal_all(signal.SIGKILL)
        while self._reap(block=True) is not None:
            pass

    def _reap(self, block: bool) -> tuple[int, int] | None:
        """Reap one child (ours or re-parented); None when there are no children left."""
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return None
        return (pid, status) if pid else (0, 0)

    def watch(self) -> int:
        """Wait for the ranks; the exit code of the node."""
        running = dict(self.children)
        while running:
            reaped = self._reap(block=True)
            if reaped is None:
                break
            pid, status = reaped
            if pid not in running:
                continue  # a re-parented orphan: reaped, nothing more to do
            local_rank = running.pop(pid)
            if self.stopping.is_set():
                continue
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                self._report(local_rank, code)
                self._diagnose_if_timed_out(local_rank, code)
                self.stop(grace=min(self.node.grace_period, 2.0))
                return 1
        return 0

    def diagnose(self, *, wait: bool = False) -> None:
        """Record what every rank of this node is doing now (`hang`), one report at a time
        (``wait``: for the one being written, instead of skipping)."""
        if not self._diagnosing.acquire(timeout=10 if wait else 0):
            return
        from shoal._runtime import hang

        try:
            hang.write_report(self.node, self.rank_pids())
            self._diagnosed_at = time.monotonic()
        except Exception as e:  # a diagnosis must never keep the node from stopping
            print(f"shoal-node {self.node.node_rank}: the hang diagnosis failed: {e!r}",
                  file=sys.stderr, flush=True)
        finally:
            self._diagnosing.release()

    def _diagnose_if_timed_out(self, local_rank: int, code: int) -> None:
        """A rank timed out in a collective: its peers here are still alive; record them,
        unless the engine asked for a report during this collective (all ranks alive then)."""
        from shoal._runtime import hang

        n = self.node
        if local_rank < 0 or not hang.rank_timed_out(n, n.node_rank * n.nproc_per_node +
                                                     local_rank, code):
            return
        self._diagnosing.acquire(timeout=10)  # one the engine asked for may be under way
        self._diagnosing.release()
        if time.monotonic() - self._diagnosed_at > n.collective_timeout:
            self.diagnose(wait=True)

    def _report(self, local_rank: int, code: int) -> None:
        from shoal._runtime.rank import attempt_folder
        from shoal._storage.store import join, open_store

        n = self.node
        rank = n.node_rank * n.nproc_per_node + local_rank if local_rank >= 0 else None
        sig = signal.Signals(-code).name if code < 0 and -code in signal.valid_signals() \
            else None
        report = {"node": n.node_rank, "local_rank": local_rank if local_rank >= 0 else None,
                  "rank": rank, "exit_code": None if sig else code, "signal": sig,
                  "at": time.time()}
        what = f"local rank {local_rank}" if local_rank >= 0 else "torchrun"
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
    from dataclasses import replace

    from shoal._storage.bundle import fetch

    path = str(fetch(uri, node.code_file))
    os.environ[contract.CODE_FILE] = path
    return replace(node, code_file=path)


def main() -> None:
    node = fetch_code(NodeEnv.from_env())
    become_subreaper()
    wait_for_master(node)
    runner = Node(node)

    sampler: NodeSampler | None = None

    def stop_and_exit(signum: int) -> None:
        runner.stop(node.grace_period)
        if sampler is not None:
            sampler.stop()
        os._exit(128 + signum)

    def on_term(signum: int, frame: object) -> None:
        # Preemption or gang stop: give the ranks their grace period, then end them all.
        threading.Thread(target=stop_and_exit, args=(signum,), daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, lambda signum, frame: threading.Thread(  # the engine asks
        target=runner.diagnose, name="shoal-hang", daemon=True).start())
    watch_lifeline(runner, min(node.grace_period, 5.0))
    runner.start()
    sampler = start_sampler(node, runner.rank_pids)  # after the forks: no thread may precede them
    code = runner.watch()
    if sampler is not None:
        sampler.stop()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
