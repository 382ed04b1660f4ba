"""`from flyte.io import File, Dir`: tasks return files and folders as references and read them
on the other side (downloaded, or streamed with `open`); a task writes a new remote file with
`File.new_remote()` and `open("wb")`; the script uploads a local file and runs a task on it in
local mode."""

import tempfile
from pathlib import Path

import shoal as flyte
from shoal.io import Dir, File

env = flyte.TaskEnvironment(name="port_io")


@env.task
async def write_notes(lines: list[str]) -> File:
    path = Path(tempfile.mkdtemp()) / "notes.txt"
    path.write_text("\n".join(lines))
    return await File.from_local(str(path))


@env.task
async def count_lines(notes: File) -> int:
    local = await notes.download()
    return len(Path(local).read_text().splitlines())


@env.task
async def make_tree(n: int) -> Dir:
    root = Path(tempfile.mkdtemp())
    for i in range(n):
        (root / f"part-{i}.txt").write_text(str(10 * i))
    return await Dir.from_local(str(root))


@env.task
async def sum_tree(tree: Dir) -> int:
    total = 0
    async for f in tree.walk():
        total += int(Path(await f.download()).read_text())
    return total


@env.task
async def stream_squares(n: int) -> File:
    out = File.new_remote("squares.csv")
    async with out.open("wb") as fh:
        await fh.write(b"square\n")
        for i in range(n):
            await fh.write(f"{i * i}\n".encode())
    return out


@env.task
async def sum_column(table: File) -> int:
    async with table.open("rb") as fh:
        await fh.readline()  # the header
        return sum(int(row) for row in await fh.readlines())


@env.task
async def top_level_sizes(tree: Dir) -> int:
    names = [f.name async for f in tree.walk(recursive=False)]
    listed = await tree.list_files()
    first = await tree.get_file("part-0.txt")
    assert first is not None and [f.name for f in listed] == names
    with first.open_sync("rb") as fh:
        return len(names) * 100 + int(fh.read())


@env.task
async def pipeline(lines: list[str]) -> list[int]:
    notes = await write_notes(lines)
    tree = await make_tree(4)
    squares = await stream_squares(10)
    return [await count_lines(notes), await sum_tree(tree), await sum_column(squares),
            await top_level_sizes(tree)]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(pipeline, lines=["a", "b", "c", "d", "e"])
    run.wait()
    print(f"RESULT pipeline {run.outputs()}")

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as tmp:
        tmp.write("one\ntwo\nthree\n")
    notes = File.from_local_sync(tmp.name)
    local = flyte.with_runcontext(mode="local").run(count_lines, notes=notes)
    local.wait()
    print(f"RESULT uploaded {local.outputs()}")
