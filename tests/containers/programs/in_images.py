"""Tasks that run inside their images (`shoal run --containers`), for tests/containers.

Every environment runs in one image that has what this machine's interpreter lacks: the pip
package ``inflection`` and the file /opt/shoal-test/image_only.txt. The gang's ranks are
plain Python (no torch: see tests/containers/test_local_containers.py for why); they meet
over TCP at the master address, as torch's store would.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy

HERE = Path(__file__).resolve().parent
IMAGE = (flyte.Image.from_debian_base(name="shoal-containers-test")
         .with_pip_packages("inflection==0.5.1")
         .with_source_file(HERE / "image_only.txt", "/opt/shoal-test"))

probe_env = flyte.TaskEnvironment(
    name="probe", image=IMAGE, env_vars={"GREETING": "hello"},
    secrets=[flyte.Secret(key="test-token", as_env_var="TEST_TOKEN")],
    resources=flyte.Resources(cpu=(1, 1.5), memory=("256Mi", "384Mi"), shm="96Mi"))
oom_env = flyte.TaskEnvironment(name="hog", image=IMAGE,
                                resources=flyte.Resources(cpu=1, memory="128Mi"))
pair_env = ClusteredTaskEnvironment(
    name="pair", image=IMAGE, replicas=2, nproc_per_node=1,
    resources=flyte.Resources(cpu=(0.5, 1), memory="512Mi"),
    failure_policy=ClusterFailurePolicy(max_restarts=1, grace_period=2, collective_timeout=30))
hog_node_env = ClusteredTaskEnvironment(
    name="hog-node", image=IMAGE, replicas=1, nproc_per_node=1,
    resources=flyte.Resources(cpu=1, memory="160Mi"))
driver_env = flyte.TaskEnvironment(name="driver", image=IMAGE,
                                   depends_on=[probe_env, oom_env, pair_env, hog_node_env])
waiter_env = flyte.TaskEnvironment(name="waiter", image=IMAGE)


def _cgroup(*names: str) -> str:
    """The first of ``names`` under /sys/fs/cgroup that exists, read (v1 or v2)."""
    for name in names:
        path = Path("/sys/fs/cgroup") / name
        if path.exists():
            return path.read_text().strip()
    return ""


@probe_env.task
def probe() -> dict[str, str]:
    import inflection

    print("probe: running inside its image", flush=True)
    flyte.log_metrics({"probe_metric": 7.0}, step=1)
    return {
        "executable": sys.executable,
        "version": sys.version.split()[0],
        "inflection": inflection.camelize("in_image"),
        "image_only": Path("/opt/shoal-test/image_only.txt").read_text().strip(),
        "greeting": os.environ.get("GREETING", ""),
        "token": os.environ.get("TEST_TOKEN", ""),
        "host_only": os.environ.get("SHOAL_TEST_HOST_ONLY_VAR", "")
        + os.environ.get("HOST_ONLY_VAR", ""),
        "memory_limit": _cgroup("memory/memory.limit_in_bytes", "memory.max"),
        "cpu_quota": _cgroup("cpu/cpu.cfs_quota_us", "cpu.max"),
        "shm": str(os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize),
        "pids_max": _cgroup("pids/pids.max", "pids.max"),
        "home_secrets": str(sorted(os.listdir(Path(os.environ["SHOAL_HOME"], "secrets")))),
        "tag": IMAGE.tag,  # computed inside the image: the same as outside
    }


@oom_env.task
def hog() -> int:
    block = bytearray(512 * 2**20)  # four times its limit
    for i in range(0, len(block), 4096):
        block[i] = 1
    return len(block)


@hog_node_env.task
def hog_rank() -> int:
    """A rank past its node's limit: the kernel kills the rank, the launcher (PID 1) lives."""
    return hog.func()


@pair_env.task
def pair() -> dict[str, str]:
    """Rank 0 listens at the master address, rank 1 connects: each learns the other's
    container. On the first start rank 0 saves a checkpoint and rank 1 fails; the restart
    loads it."""
    ctx = flyte.ctx()
    host, port = ctx.master_addr, int(ctx.master_port)
    me = f"{socket.gethostname()}:{os.getpid()}:{Path('/proc/1/cmdline').read_bytes()[:60]!r}"
    if ctx.rank == 0:
        if ctx.restart_attempt == 0:
            ctx.checkpoint.save_sync(b"saved-at-restart-0")
        with socket.create_server((host, port)) as server:
            conn, _ = server.accept()
            with conn:
                peer = conn.recv(4096).decode()
                conn.sendall(me.encode())
    else:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = socket.create_connection((host, port), timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with conn:
            conn.sendall(me.encode())
            peer = conn.recv(4096).decode()
        if ctx.restart_attempt == 0:
            raise SystemExit(3)  # the whole gang restarts, in the same containers
    loaded = ctx.checkpoint.load_sync() if ctx.rank == 0 else b""
    return {"rank": str(ctx.rank), "restart": str(ctx.restart_attempt), "me": me,
            "peer": peer, "loaded": (loaded or b"").decode()}


@driver_env.task
def main() -> dict[str, dict[str, str]]:
    facts = probe()
    gang = pair()
    errors = {}
    for name, task in (("call", hog), ("rank", hog_rank)):
        try:
            task()
            errors[name] = "no error"
        except flyte.errors.OOMError as e:
            errors[name] = f"OOMError: {e}"
    return {"probe": facts, "pair": gang, "hog": errors}


@waiter_env.task
def wait_for(go: str) -> str:
    """Save a checkpoint, say so (a file beside ``go``), then wait for ``go`` to exist."""
    cp = flyte.ctx().checkpoint
    earlier = cp.load_sync()
    if earlier is None:
        cp.save_sync(b"from the first run")
        Path(go + ".saved").write_text(socket.gethostname())
        while not Path(go).exists():
            time.sleep(0.1)
    return (earlier or b"").decode()
