"""Tasks for the real-process tests of RetryStrategy/Backoff, Timeout, Secret and ReusePolicy."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from datetime import timedelta
from typing import Any

import shoal
from shoal import _contract as contract
from shoal.clustered import ClusteredTaskEnvironment

plain = shoal.TaskEnvironment(name="plain", resources=shoal.Resources(cpu=0.1))


@plain.task(retries=shoal.RetryStrategy(
    count=2, backoff=shoal.Backoff(base=timedelta(seconds=0.4), factor=2.0, cap=1.0)))
def flaky(folder: str) -> list[float]:
    """Fails on its first two attempts; returns the start time of each attempt."""
    with open(os.path.join(folder, "starts"), "a") as f:
        f.write(f"{time.time()}\n")
    with open(os.path.join(folder, "starts")) as f:
        starts = [float(line) for line in f]
    if len(starts) < 3:
        raise RuntimeError(f"attempt {len(starts)} fails")
    return starts


secretive = shoal.TaskEnvironment(
    name="secretive", resources=shoal.Resources(cpu=0.1),
    secrets=[shoal.Secret("hf-token", as_env_var="HF_TOKEN"),
             shoal.Secret("api-key", group="team", as_env_var="TEAM_API_KEY"),
             shoal.Secret("db-pass", group="prod", mount="/etc/flyte/secrets")])


@secretive.task
def read_secrets() -> dict[str, str]:
    path = os.path.join(os.environ[contract.SECRETS_DIR], "prod", "db-pass")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    with open(path) as f:
        mounted = f.read()
    return {"hf": os.environ["HF_TOKEN"], "team": os.environ["TEAM_API_KEY"],
            "mounted": mounted, "mode": oct(mode)}


needs_missing = shoal.TaskEnvironment(name="needs-missing", secrets="no-such-secret")


@needs_missing.task(retries=2)
def uses_missing(folder: str) -> str:
    open(os.path.join(folder, "ran"), "w").close()
    return os.environ["NO_SUCH_SECRET"]


# The TTL leaves room for a loaded machine between a call's end and the next call's start
# (0.5 s was once too little in a full-suite run); the checks below wait for a worker's exit
# rather than sleep a fixed time.
IDLE_TTL = 2.0
reused = shoal.TaskEnvironment(name="reused", resources=shoal.Resources(cpu=0.1),
                               reusable=shoal.ReusePolicy(replicas=1, idle_ttl=IDLE_TTL))
reuse_driver = shoal.TaskEnvironment(name="reuse-driver", depends_on=[reused])


@reused.task
async def pid(seconds: float) -> int:
    await asyncio.sleep(seconds)
    return os.getpid()


def _alive(p: int) -> bool:
    try:
        os.kill(p, 0)
    except ProcessLookupError:
        return False
    return True


async def _until(done: Any, within: float) -> float:
    """Seconds until ``done()`` held, polled; ``within`` and more when it never did."""
    start = time.monotonic()
    while not done() and time.monotonic() - start < within:
        await asyncio.sleep(0.05)
    return time.monotonic() - start if done() else within + 1


@reuse_driver.task
async def idle_ttl_ends_workers() -> list[bool]:
    """[same worker for back-to-back calls, kept idle after them and gone after its TTL,
    new one differs]"""
    a = await pid(0.0)
    b = await pid(0.0)
    kept = _alive(a)
    gone_after = await _until(lambda: not _alive(a), IDLE_TTL + 10)
    c = await pid(0.0)
    return [a == b, kept and gone_after <= IDLE_TTL + 10, c != a]


@reuse_driver.task
async def replicas_bound_warm_workers() -> list[int]:
    """[distinct workers for 3 concurrent calls, how many of them are still alive after the
    ones past the bound exited]"""
    pids = set(await asyncio.gather(pid(0.5), pid(0.5), pid(0.5)))
    await _until(lambda: sum(_alive(p) for p in pids) <= 1, 10)
    return [len(pids), sum(_alive(p) for p in pids)]


# Asks for more than any pool has: clamped to the whole pool, so two calls cannot overlap.
hog = shoal.TaskEnvironment(name="hog", resources=shoal.Resources(cpu=4096))
hog_gang = ClusteredTaskEnvironment(name="hog-gang", replicas=1, nproc_per_node=1,
                                    resources=shoal.Resources(cpu=4096))
queue_driver = shoal.TaskEnvironment(name="queue-driver", depends_on=[hog, hog_gang])


@hog.task
async def hold(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "held"


@hog.task(timeout=shoal.Timeout(max_queued_time=0.3))
async def impatient() -> str:
    return "admitted"


@hog_gang.task(timeout=shoal.Timeout(max_queued_time=0.3))
def impatient_gang() -> str:
    return "admitted"


async def _failure(call: Any) -> str:
    try:
        return str(await call)
    except shoal.errors.TaskFailed as e:
        return f"{e.info.kind}: {e.info.message}"


@queue_driver.task
async def queued_too_long() -> list[str]:
    first = asyncio.ensure_future(hold(2.0))
    await asyncio.sleep(0.5)  # `hold` holds the whole pool now
    plain_call = await _failure(impatient())
    gang_call = await _failure(impatient_gang.aio())
    return [await first, plain_call, gang_call]


@reuse_driver.task
async def reuse_off_starts_fresh_workers() -> list[bool]:
    """[two calls ran in different processes, both gone after]"""
    fresh = pid.override(reusable="off")
    a = await fresh(0.0)
    b = await fresh(0.0)
    await asyncio.sleep(0.3)
    return [a != b, not _alive(a) and not _alive(b)]


@plain.task(short_name="Say hello", links=("https://example.com/dash",), entrypoint=True)
def described() -> str:
    """Greets.

    A second paragraph."""
    return "hi"
