"""The rank zygote starts glibc's malloc where its own adaptation ends (`zygote.warm_allocator`):
a block freed by a forked rank's step is reused by the next, not handed back to the kernel and
faulted in afresh (each fresh page ~3 µs on a VM, tens of thousands in a first step). A user's
own malloc settings are left alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROGRAM = """
import ctypes, os, sys
from shoal._runtime import zygote
print("WARMED", zygote.warm_allocator(os.environ))
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def faults():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])
size = 8 * 1024 * 1024  # a tensor's size: over glibc's first threshold (128 KiB)
for round in range(2):  # glibc unwarmed reuses the block only once two frees have raised it
    block = libc.malloc(size)
    before = faults()
    ctypes.memset(block, round + 1, size)
    print(f"FAULTS{round}", faults() - before)
    libc.free(block)
"""


def _run(**env: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60)
    assert out.returncode == 0, out.stderr
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, /proc")
def test_a_freed_block_is_reused_unless_the_user_set_malloc() -> None:
    warm = _run()
    assert warm["WARMED"] == "True"
    assert int(warm["FAULTS0"]) >= 1024  # 8 MiB of fresh pages, the first time
    assert int(warm["FAULTS1"]) < 64, warm  # the same pages again: no fresh ones
    # The user's own setting decides: glibc's default then hands the block back at free.
    mine = _run(MALLOC_TRIM_THRESHOLD_=str(128 * 1024))
    assert mine["WARMED"] == "False"
    assert int(mine["FAULTS1"]) >= 1024, mine
    tuned = _run(GLIBC_TUNABLES="glibc.malloc.trim_threshold=131072")
    assert tuned["WARMED"] == "False"
