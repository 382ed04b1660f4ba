"""A small three-environment pipeline: the shape of a pretraining job, in miniature.

    shoal run examples/pipeline.py main            # first run: builds the shards
    shoal run examples/pipeline.py main            # second run: the data step is a cache hit
    shoal run examples/pipeline.py main --shards 8 --dry-run

- ``data`` (cached): reads a corpus — the Python standard library's own source, present on
  every machine — and writes word-count shards into a folder it returns as a `shoal.Dir`;
- ``compute``: one call per shard, fanned out with ``asyncio.gather``; each reads only its
  shard from the store and returns a small dataclass;
- ``driver``: calls both; ``depends_on`` says which environments it may call.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import shoal

data_env = shoal.TaskEnvironment(
    name="data",
    resources=shoal.Resources(cpu=1, memory="1Gi"),
    cache="auto",  # a second run with the same inputs reuses the shards
)
compute_env = shoal.TaskEnvironment(
    name="compute",
    resources=shoal.Resources(cpu=1, memory="512Mi"),
    env_vars={"OMP_NUM_THREADS": "1"},
)
driver_env = shoal.TaskEnvironment(
    name="driver",
    resources=shoal.Resources(cpu=1, memory="256Mi"),
    depends_on=[data_env, compute_env],
)


@dataclass
class ShardStats:
    shard: int
    words: int
    distinct: int
    top: list[str]


@data_env.task
async def prepare(shards: int = 4, max_files: int = 400) -> shoal.Dir:
    """Split the standard library's source into ``shards`` files of words."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))[:max_files]
    print(f"reading {len(files)} files from {stdlib}")
    out = Path(tempfile.mkdtemp(prefix="shards-"))
    buckets: list[list[str]] = [[] for _ in range(shards)]
    for i, f in enumerate(files):
        words = re.findall(r"[A-Za-z_]{3,}", f.read_text(errors="replace"))
        buckets[i % shards].extend(w.lower() for w in words)
    for i, words in enumerate(buckets):
        (out / f"shard-{i:03d}.json").write_text(json.dumps(words))
    print(f"wrote {shards} shards to {out}")
    return await shoal.Dir.from_local(str(out))


@compute_env.task
async def count(shards: shoal.Dir, shard: int) -> ShardStats:
    """Count the words of one shard (fetching only that shard)."""
    files = {f.name: f for f in await shards.listing()}  # names only: nothing downloaded yet
    local = await files[f"shard-{shard:03d}.json"].download()
    words = json.loads(Path(local).read_text())
    counts = collections.Counter(words)
    print(f"shard {shard}: {len(words)} words in pid {os.getpid()}")
    return ShardStats(shard, len(words), len(counts), [w for w, _ in counts.most_common(5)])


@driver_env.task
async def main(shards: int = 4) -> dict[str, int]:
    """Prepare the shards (cached), count them in parallel, and sum up."""
    data = await prepare(shards=shards)
    stats = await asyncio.gather(*(count(data, i) for i in range(shards)))
    total = sum(s.words for s in stats)
    for s in stats:
        print(f"shard {s.shard}: {s.words} words, {s.distinct} distinct, top {s.top}")
    return {"shards": shards, "words": total, "largest_shard": max(s.words for s in stats)}


if __name__ == "__main__":
    run = shoal.run(main, shards=4)
    print(run.name, run.outputs()[0])
