"""Flyte 2-style tasks that stream Files and a Dir into the store with ``open("wb")`` and read
them back in another task process (for tests/process/test_io_streams.py)."""

from __future__ import annotations

from dataclasses import dataclass

import shoal as flyte
from shoal.io import Dir, File

env = flyte.TaskEnvironment(name="iostreams")


@dataclass
class Produced:
    numbers: File
    shards: Dir


@env.task
async def produce(n: int) -> Produced:
    numbers = File.new_remote("numbers.txt")
    async with numbers.open("w", block_size=4096) as fh:  # many blocks
        for i in range(n):
            await fh.write(f"{i}\n")
    shards = Dir.new_remote("shards")
    for k in range(3):
        part = File.from_existing_remote(f"{shards.path}/part-{k}/data.bin")
        with part.open_sync("wb") as fh:
            fh.write(bytes([k]) * (1000 * (k + 1)))
    return Produced(numbers=numbers, shards=shards)


@env.task
def consume(p: Produced) -> dict[str, int]:
    with p.numbers.open_sync("r") as fh:
        total = sum(int(line) for line in fh)
    sizes = {}
    for f in p.shards.walk_sync():
        with f.open_sync("rb") as fh:
            fh.seek(-1, 2)  # only the last byte is fetched
            last = fh.read(1)[0]
            sizes[f.path.rsplit("/", 2)[-2]] = fh.tell() * 10 + last
    return {"total": total, **sizes}


@env.task
async def pipeline(n: int) -> dict[str, int]:
    return await consume.aio(await produce.aio(n))


@env.task(retries=1)
def retried_writer(note: str) -> str:
    """Attempt 0 writes its named file and fails; attempt 1 finds it at the same path."""
    partial = File.named_remote("partial.txt")
    if flyte.ctx().attempt == 0:
        with partial.open_sync("w") as fh:
            fh.write(note)
        raise RuntimeError("the first attempt fails after writing")
    with partial.open_sync("r") as fh:
        return f"{fh.read()} (read by attempt {flyte.ctx().attempt})"
