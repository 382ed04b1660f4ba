"""The node's rank factory: a process that has imported torch and Shoal's rank runtime once,
and forks every rank of every start of the node from that state.

Started by the node launcher (`launcher.Zygote`) as ``python -m shoal._runtime.node.zygote REQ REP``
(two inherited pipe ends) before the launcher starts any thread. It never starts a thread
itself (it checks after its imports: torch must not have started a thread pool), so forking
it is safe; a rank then costs a fork instead of an interpreter start plus torch's imports, at
the first start and at every restart (benchmarks/results/*-gang-launch.md: "shoal direct"
against "no pre-import").

Protocol, one JSON line each way: it first says ``{"ready": bool, "why": "..."}``; then for
each ``{"id": i, "of": n, "env": {...}, "cwd": "...", "log": "..."}`` it forks twice and answers
``{"id": i, "pid": p}``: the rank is the grandchild, whose parent exits at once, so the rank is
re-parented to the launcher (a child subreaper, or the init of its PID namespace), which reaps
it and reads its exit status as it would a child it started itself. The ``n`` ranks of one
request batch wait until the last is forked, then run together. EOF on the request pipe,
or the launcher's death, ends the zygote.

Each rank starts as a fresh ``python -m shoal._runtime.node.rank`` would: exactly the environment it
is given, the working directory, ``sys.argv``, stdout and stderr on the node's log, Python's
default signal dispositions and an empty signal mask, and numpy's global generator reseeded
(``random`` reseeds itself at fork). The user's module is imported by the rank, never here.
What a fork cannot renew: the interpreter's string-hash seed is the zygote's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from typing import Any

from shoal import _contract as contract
from shoal._runtime.forks import as_fresh, die_with_parent, exit_after, preimport
from shoal._runtime.log_files import redirect_output

# Modules every torch rank of Shoal needs before the user's code runs: torch, its process
# groups, torch._dynamo (which DDP() imports, slowly: once here, not in every rank), the
# checkpoint code (torch.distributed.checkpoint, for state-dict saves and loads), Shoal's rank
# runtime with what `rank.run_rank` imports as it starts (the task loader, the inputs' codecs
# and store: ~0.17 s a rank on 2 busy cores, paid again at every restart when not here), and
# what a task file's own imports of Shoal load (`shoal.clustered`; `packaging`, which reads
# an Image's pip requirements; the checkpoints' CRC32C). And what a restarted rank's first
# state-dict load imports: DCP's `get_state_dict`/`set_state_dict`, the config torch.load
# reads on its first call, and Shoal's state-dict load (`state_dicts`, `trust`: torch-only
# modules a load imports when called, ~9 ms a rank where bytecode is not cached). None of
# them starts a thread at import (checked after importing, in `preimport`).
PREIMPORTS = ("torch", "torch.distributed", "torch._dynamo", "torch.distributed.checkpoint",
              "torch.distributed.checkpoint.state_dict", "torch.utils.serialization.config",
              "shoal._runtime.node.rank", "shoal._runtime.loader", "shoal._runtime.observe.reports",
              "shoal._storage.codecs", "shoal._storage.blobs", "shoal._storage.call_io",
              "shoal.clustered", "packaging.requirements", "shoal._storage.checkpoints",
              "shoal._storage.checkpoints.state_dicts", "shoal._storage.checkpoints.trust")


def _rank_child(request: dict[str, object], fds: tuple[int, int], go: int) -> None:
    """In the forked rank: become what a fresh rank process is, then run it; never returns."""

    def body() -> None:
        for fd in fds:
            os.close(fd)
        if request["log"]:  # "": the node's first log, which the zygote writes to already
            redirect_output(str(request["log"]))
        env = request["env"]
        assert isinstance(env, dict)
        from shoal._runtime.node import rank

        as_fresh(env, str(request["cwd"]), rank.__file__ or "")
        os.read(go, 1)  # until the last rank of the node is forked too
        os.close(go)
        rank.main()

    exit_after(body)


def serve(req_fd: int, rep_fd: int) -> None:
    requests = os.fdopen(req_fd, "rb", buffering=0)
    why = preimport(PREIMPORTS)
    os.write(rep_fd, (json.dumps({"ready": not why, "why": why}) + "\n").encode())
    if why:
        return
    if code_file := os.environ.get(contract.CODE_FILE):
        from shoal._runtime.loader import precompile

        precompile(code_file)  # each rank imports the user's modules without compiling them
    # Each request forks a middle process that forks the rank and exits: the kernel reaps the
    # middles, so the next request is served at once and a node's ranks start together.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    buffered = b""
    while True:
        while b"\n" not in buffered:
            chunk = requests.read(65536)
            if not chunk:
                return  # the launcher closed it, or is gone
            buffered += chunk
        line, buffered = buffered.split(b"\n", 1)
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        if request["id"] == 0:  # the node's ranks wait on this pipe, to run together
            go_r, go_w = os.pipe()
        if os.fork() == 0:
            pid = os.fork()
            if pid == 0:
                os.close(go_w)
                _rank_child(request, (req_fd, rep_fd), go_r)
            # One write under PIPE_BUF: the middles' answers never interleave.
            os.write(rep_fd, (json.dumps({"id": request["id"], "pid": pid}) + "\n").encode())
            os._exit(0)
        if request["id"] == request["of"] - 1:  # all forked: EOF lets them go at once
            os.close(go_w)
            os.close(go_r)


class Zygote:
    """The launcher's side: starts the zygote and asks it for ranks."""

    def __init__(self, environ: dict[str, str]) -> None:
        import subprocess

        req_r, self._requests = os.pipe()
        self._replies_fd, rep_w = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "shoal._runtime.node.zygote", str(req_r), str(rep_w)],
            env=environ, pass_fds=(req_r, rep_w))
        os.close(req_r)
        os.close(rep_w)
        self._replies = os.fdopen(self._replies_fd, "rb")
        self.pid = self._proc.pid
        self._ready: bool | None = None

    def ready(self) -> bool:
        """Whether it pre-imported and may fork (waits for its imports the first time)."""
        if self._ready is None:
            answer = self._answer()
            self._ready = bool(answer and answer.get("ready"))
            if not self._ready:
                why = answer.get("why") if answer else "it exited"
                print(f"shoal-node: ranks start afresh, not forked: {why}", file=sys.stderr,
                      flush=True)
        return self._ready

    def fork(self, ranks: list[dict[str, str]], cwd: str, log: str) -> list[int | None]:
        """The pids of new ranks, one with each environment of ``ranks``, forked together;
        None for each the zygote did not fork (it is gone)."""
        if not self.ready():
            return [None] * len(ranks)
        lines = [json.dumps({"id": i, "of": len(ranks), "env": env, "cwd": cwd, "log": log})
                 + "\n" for i, env in enumerate(ranks)]
        pids: list[int | None] = [None] * len(ranks)
        try:
            os.write(self._requests, "".join(lines).encode())
        except OSError:
            self._ready = False
            return pids
        for _ in ranks:
            answer = self._answer()
            if answer is None or "pid" not in answer:
                self._ready = False
                break
            pids[int(answer["id"])] = int(answer["pid"])
        return pids

    def _answer(self) -> dict[str, Any] | None:
        try:
            line = self._replies.readline()
        except OSError:
            return None
        answer: dict[str, Any] | None = json.loads(line) if line else None
        return answer

    def close(self) -> None:
        """End it (the launcher reaps it with its other children)."""
        self._ready = False
        with contextlib.suppress(OSError):
            os.close(self._requests)
        self._replies.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def main() -> None:
    die_with_parent()
    serve(int(sys.argv[1]), int(sys.argv[2]))


if __name__ == "__main__":
    main()
