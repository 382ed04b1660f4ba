"""A driver whose second step waits on a file: the test kills the driver there, then resumes.
And a gang whose run fails with half a sharded step saved, for its resumed run to finish."""

from __future__ import annotations

import time
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment

steps = shoal.TaskEnvironment(name="steps")
boss = shoal.TaskEnvironment(name="resumer", depends_on=[steps])


@steps.task
def first(marker_dir: str) -> int:
    n = len(list(Path(marker_dir).glob("first-*")))
    Path(marker_dir, f"first-{n}").write_text("ran")
    return 10


@steps.task
def second(x: int, marker_dir: str) -> int:
    Path(marker_dir, "second-started").write_text("1")
    while not Path(marker_dir, "go").exists():
        time.sleep(0.1)
    return x + 1


@boss.task
async def pipeline(marker_dir: str) -> int:
    a = await first.aio(marker_dir)
    return await second.aio(a, marker_dir)


half = ClusteredTaskEnvironment(name="halfsaved", replicas=2, nproc_per_node=1,
                                resources=shoal.Resources(cpu=1, memory="300Mi"))


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


@half.task
def half_saved(marker_dir: str) -> str:
    """The first run: rank 0 lands its shard of step 0, rank 1 never does, the run fails. Its
    resumed run: rank 1 lands its shard first, then rank 0 looks; it must find no step. The
    test says which run this is ("resuming", written before the resume): rank 1 starting after
    rank 0 has already failed must still take the first run's way."""
    ctx, folder = shoal.ctx(), Path(marker_dir)
    cp = ctx.checkpoint
    if not (folder / "resuming").exists():
        if ctx.rank == 0:
            cp.save_shard_sync(b"dead run 0", step=0)
            (folder / "first-run-over").write_text("1")
        else:
            _wait_for(folder / "first-run-over")
        raise RuntimeError("the first run fails with half of step 0 saved")
    if ctx.rank == 1:
        committed = cp.save_shard_sync(b"resumed 1", step=0)
        (folder / "rank1-saved").write_text(str(committed))
        return ""
    _wait_for(folder / "rank1-saved")
    seen = cp.latest()
    cp.save_shard_sync(b"resumed 0", step=0)
    return f"latest {seen}, rank 1 committed {(folder / 'rank1-saved').read_text()}, " \
           f"shards {cp.load_shard_sync(rank=0)!r} {cp.load_shard_sync(rank=1)!r}"
