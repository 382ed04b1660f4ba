"""Rank 0 hosts the process group's TCPStore as soon as it starts (`frameworks.host_store_early`),
and its own ``init_process_group`` shares that server.

Without it, a rank that dials the master before rank 0 listens backs off for 0.3-1 s (torch's
jittered exponential backoff), which a gang's restart paid on every start: its ranks are
forked together and the others often dial first. Two real processes, gloo: rank 1 connects to
the store while rank 0 has not yet called ``init_process_group`` (it could not, were the store
not hosted: its connect times out), then both make the group.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import free_port

_RANK0 = """
import os, sys, types
import torch.distributed as dist
from shoal._runtime import frameworks
node = types.SimpleNamespace(launch="torchrun", master_addr="127.0.0.1", collective_timeout=30.0)
frameworks.host_store_early(node)  # torchrun's agent hosts it: not this rank
print("UNDER_TORCHRUN", len(frameworks._early_store), flush=True)
node.launch = "direct"
frameworks.host_store_early(node)
print("HOSTED", len(frameworks._early_store), flush=True)
sys.stdin.readline()  # until rank 1 has connected
dist.init_process_group("gloo")  # env://: the same port, the server shared
dist.barrier()
print("GROUP", dist.get_world_size(), flush=True)
os._exit(0)
"""

_RANK1 = """
import os, time
from datetime import timedelta
import torch.distributed as dist
t = time.monotonic()
store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=False,
                      wait_for_workers=False, timeout=timedelta(seconds=5))
print("CONNECTED", round(time.monotonic() - t, 3), flush=True)
dist.init_process_group("gloo")
dist.barrier()
print("GROUP", dist.get_world_size(), flush=True)
os._exit(0)
"""


@pytest.mark.slow
def test_rank0_hosts_the_store_before_its_process_group() -> None:
    pytest.importorskip("torch")
    base = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    r0 = subprocess.Popen([sys.executable, "-c", _RANK0], env={**base, "RANK": "0"},
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs = [r0]
    try:
        assert r0.stdout is not None and r0.stdin is not None
        assert r0.stdout.readline().split() == ["UNDER_TORCHRUN", "0"]
        assert r0.stdout.readline().split() == ["HOSTED", "1"]
        r1 = subprocess.Popen([sys.executable, "-c", _RANK1], env={**base, "RANK": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(r1)
        assert r1.stdout is not None
        connected = r1.stdout.readline().split()
        # Rank 0 waits on its stdin, before init_process_group: only its early store answers
        # (without one, this connect times out after 5 s and rank 1 exits non-zero).
        assert connected[:1] == ["CONNECTED"], r1.communicate(timeout=60)
        r0.stdin.write("go\n")
        r0.stdin.flush()
        out1, err1 = r1.communicate(timeout=120)
        out0, _ = r0.communicate(timeout=120)
        assert r1.returncode == 0, err1
        assert r0.returncode == 0
        assert "GROUP 2" in out0 and "GROUP 2" in out1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
