"""Checkpoint I/O: Shoal's ``Checkpoint`` against raw writes and reads of the same bytes.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/checkpoint_io.py

Five sections, each measured in its own subprocess (nothing shared but the disk), rounds
interleaved so drift hits both sides; each figure is the median of ``--rounds`` with min–max
(each section's child and table: a module of ``_checkpoint/``; this file runs them):

1. sync save on a ``file://`` store, for each size in ``--sizes`` (MiB of random bytes):
   ``save_sync(bytes)`` against a raw ``open/write/fsync`` of the same bytes to the same
   folder, and ``save_sync(<file path>)`` against ``shutil.copyfile`` + fsync of that file
   (a save must copy it: ``FILE_SAVE_RAW``), with the write of its bytes as a reference;
2. load: ``load_sync()`` of the bytes version (verified: CRC32C of every byte) against
   ``open(path, "rb").read()``, cold (both files' pages evicted first with
   ``posix_fadvise(DONTNEED)``) and warm; and the first ``load_sync()`` of the file version
   (a verified copy into ``local_dir/loaded``) against a cold ``shutil.copyfile``; and, for
   reference, the bytes load on its plain path (read into a ``bytearray``, then copied into
   the ``LoadedBytes`` returned: what runs where the in-place fill of ``loaded_bytes`` is not
   available);
3. async save of ``--async-mib``: how long ``save_async(bytes)``, ``save_async(bytearray)``
   and ``save_state_dict(..., async_save=True)`` (a dict of float32 tensors, through DCP, in a
   one-process gloo group) block the caller, against one in-memory copy of the same state
   (``bytearray(x)``, ``tensor.clone()``), the physical floor; and the sync saves of the same;
   then a small CPU training loop (an MLP, 2 threads, as many as the cores of a 2-CPU
   machine) in steps/s with no save against the steps that overlap an async save of that
   state, which nothing waits for until it lands; how long the save stays in flight, against
   the sync save; with Shoal's default writer (lowered priority) and with the writer at
   training's priority (``SHOAL_CHECKPOINT_WRITER_NICE=0``, as every async save was before);
4. ``s3://`` on a loopback moto server (started here): ``save_sync(bytes)``,
   ``save_sync(<file>)`` and ``load_sync()`` against raw ``obstore.put``/``obstore.get`` of the
   same bytes, with the part size and concurrency Shoal's store uses; the load twice: with one
   GET (``SHOAL_RANGED_GET_MIN_MIB=off``) against one raw GET, and with the store's parallel
   ranged GETs (its default from 16 MiB) against the same ranged GETs made raw; and those raw
   ranged GETs against the one raw GET (moto reads the whole object for every range request,
   so on moto one GET is faster, where real S3 needs parallel ranges for its throughput);
5. torch state dicts of ``--state-mib`` (float32 tensors, 16 MiB each; a one-process gloo
   group): ``save_state_dict(...).result()`` against ``torch.save`` + fsync of the same state
   to a new file, and ``load_state_dict()`` (in place, verified) against ``torch.load`` of that
   file, on file://; on s3:// (``--s3-mib``) against ``torch.save`` into memory + ``obstore.put``
   and ``obstore.get`` + ``torch.load``; the s3:// load also with one GET per object, for
   reference (as in 4).

The goals (from the issue): save and verified load ≥ 0.9x the raw figure; an async save blocks
≤ 1.5x one in-memory copy; training keeps ≥ 0.8x its steps/s while an async save is in flight,
and the save lands. Evicting one file's pages with fadvise needs no root and, unlike
``/proc/sys/vm/drop_caches``, leaves other work on the machine alone; ``fincore`` (util-linux)
checks that nothing stayed resident. moto is a Python server sharing the CPUs with the client:
read its ratios, not its MiB/s. Writes ``benchmarks/results/<date>-cpu<N>-checkpoint-io.md``;
about 3 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from _checkpoint import async_save, file_io, s3, state_dicts, training
from _checkpoint.shared import (
    BUCKET,
    GOAL_BLOCKED,
    GOAL_THROUGHPUT,
    GOAL_TRAINING,
    MARK,
    TRAIN_THREADS,
    MiB,
    emit,
    throughput_ratio,
)
from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    CpuMeter,
    cpu_model,
    git_commit,
    headline,
    moto_server,
    ncpu,
    run_marked,
)
from _report import Frame, write_results

# ---------------------------------------------------------------------------------------------
# The parent: run the children, print and write the tables
# ---------------------------------------------------------------------------------------------

def run_child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    return run_marked(cmd, MARK, env=env, timeout=900, what=f"child {shlex.join(args)}")


def headlines(file_res: dict[int, dict[str, Any]], async_res: dict[str, Any], s3_size: int,
              s3_res: dict[str, Any]) -> None:
    """The summary's figures (``run_all.py``): the worst ratio of each kind, and which it is."""
    section = "(c) checkpoint I/O"

    def worst(pairs: list[tuple[str, float]], higher_is_better: bool = True) -> tuple[str, float]:
        return (min if higher_is_better else max)(pairs, key=lambda p: p[1])

    def ratios(size: int, t: dict[str, list[float]], pairs: list[tuple[str, str, str]],
               ) -> list[tuple[str, float]]:
        return [(f"{label}, {size // MiB} MiB", throughput_ratio(size, t, mine, base))
                for label, mine, base in pairs]

    save, load = [], []
    for size, got in file_res.items():
        save += ratios(size, got["times"], [("bytes", "save bytes", "raw write+fsync"),
                                            ("file", "save file", "raw copy+fsync")])
        load += ratios(size, got["times"], [("cold", "load bytes cold", "raw read cold"),
                                            ("warm", "load bytes warm", "raw read warm")])
    for figure, pairs in (("file:// sync save / raw write or copy + fsync, MiB/s (worst)", save),
                          ("file:// verified load / raw read, MiB/s (worst)", load)):
        if pairs:
            which, r = worst(pairs)
            headline(section, figure, f"{r:.2f}x ({which})", f"≥ {GOAL_THROUGHPUT}x",
                     r >= GOAL_THROUGHPUT)
    t = async_res["times"]
    which, r = worst([(name, median(t[f"blocked {name}"]) / median(t[f"copy {name}"]))
                      for name in ("bytes", "bytearray", "state dict")], higher_is_better=False)
    headline(section, "async save: time the caller is blocked / one in-memory copy (worst)",
             f"{r:.2f}x ({which})", f"≤ {GOAL_BLOCKED}x", r <= GOAL_BLOCKED)
    which, r = worst(ratios(s3_size, s3_res["times"], [
        ("save bytes", "save bytes", "raw put"), ("save file", "save file", "raw put file"),
        ("load, one GET", "load bytes one get", "raw get"),
        ("load, ranged GETs", "load bytes", "raw get ranged")]))
    headline(section, "s3:// (loopback moto) save and load / raw obstore, MiB/s (worst)",
             f"{r:.2f}x ({which})", f"≥ {GOAL_THROUGHPUT}x", r >= GOAL_THROUGHPUT)


def machine_and_disk(where: Path) -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    # The filesystem holding ``where``: the longest mount point above it.
    mounts = [line.split()[:3] for line in Path("/proc/mounts").read_text().splitlines()]
    dev, mnt, fstype = max((m for m in mounts if where.resolve().is_relative_to(m[1])),
                           key=lambda m: len(m[1]))
    name = Path(dev).name
    rot = Path(f"/sys/block/{name}/queue/rotational")
    kind = f", rotational={rot.read_text().strip()}" if rot.exists() else ""
    free = shutil.disk_usage(where).free / 2**30
    return (f"{ncpu()} CPUs ({cpu_model()}), {mem:.0f} GiB RAM, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}; disk under test: "
            f"{where} on {dev} ({fstype} at {mnt}{kind}), {free:.0f} GiB free")


def cpu_idle_share(secs: float) -> float:
    """The share of the CPUs' time idle over the next ``secs`` seconds."""
    def idle_total() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields[:8])

    idle0, total0 = idle_total()
    time.sleep(secs)
    idle1, total1 = idle_total()
    return (idle1 - idle0) / max(1, total1 - total0)




def versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("torch", "obstore", "moto"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024", help="file:// sizes in MiB, comma-separated")
    ap.add_argument("--async-mib", type=int, default=256, help="async save and training state")
    ap.add_argument("--s3-mib", type=int, default=128, help="s3:// size in MiB")
    ap.add_argument("--state-mib", type=int, default=256, help="file:// torch state dict size "
                    "in MiB (s3:// uses --s3-mib)")
    ap.add_argument("--rounds", type=int, default=7, help="repeats of the 256 MiB file:// "
                    "and async measurements; the median is kept")
    ap.add_argument("--big-rounds", type=int, default=3, help="repeats of the file:// sizes "
                    "over 256 MiB, the training and the s3:// measurements")
    ap.add_argument("--src", default=str(REPO / "src"), help="the Shoal source tree measured "
                    "(another checkout's src/ for a before/after)")
    ap.add_argument("--window", type=float, default=2.0, help="seconds of training per no-save "
                    "measurement")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="folder on the disk to test")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument("--child", choices=("file", "async", "train", "s3", "state"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--scheme", choices=("file", "s3"), default="file", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    where = Path(args.dir)
    if args.child:
        size = args.size * MiB
        if args.child == "file":
            emit(file_io.child_file(size, args.rounds, where))
        elif args.child == "async":
            emit(async_save.child_async(size, args.rounds, where))
        elif args.child == "train":
            emit(training.child_train(size, args.rounds, where, args.window))
        elif args.child == "state":
            emit(state_dicts.child_state(size, args.rounds, where, args.scheme))
        else:
            emit(s3.child_s3(size, args.rounds, where))
        return

    command = shlex.join([os.path.relpath(sys.executable, REPO), "benchmarks/checkpoint_io.py",
                          *sys.argv[1:]])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (args.src, env.get("PYTHONPATH")) if p)
    idle_before = cpu_idle_share(3.0)
    frame = Frame(f"PYTHONPATH=src {command}", os.getloadavg())
    meter = CpuMeter()  # other work on the machine; this process and its children left out
    facts = machine_and_disk(where)
    common = ["--dir", str(where)]
    small, big = ["--rounds", str(args.rounds)], ["--rounds", str(args.big_rounds)]
    sizes = []
    skipped = []
    for mib in sorted({int(x) for x in args.sizes.split(",")}):
        # Two versions kept, the raw file, a copy and a loaded copy, with room to spare.
        if shutil.disk_usage(where).free < 6 * mib * MiB:
            skipped.append(f"{mib} MiB skipped: under {6 * mib} MiB free in {where}")
        else:
            sizes.append(mib)
    file_res = {}
    for mib in sizes:
        print(f"file:// {mib} MiB...", flush=True)
        file_res[mib * MiB] = run_child(["--child", "file", "--size", str(mib), *common,
                                         *(small if mib <= 256 else big)], env)
    print(f"torch state dicts, file://, {args.state_mib} MiB...", flush=True)
    state_res = {"file": (args.state_mib * MiB, run_child(
        ["--child", "state", "--size", str(args.state_mib), *common, *small], env))}
    print(f"async saves, {args.async_mib} MiB...", flush=True)
    async_res = run_child(["--child", "async", "--size", str(args.async_mib), *common, *small],
                          env)
    print("training with a save in flight...", flush=True)
    train_res = run_child(["--child", "train", "--size", str(args.async_mib),
                           "--window", str(args.window), *common, *big], env)
    print(f"s3:// on loopback moto, {args.s3_mib} MiB...", flush=True)
    from shoal import _contract as contract

    with moto_server(BUCKET) as endpoint:
        s3_env = dict(env, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1",
                      NO_PROXY="127.0.0.1,localhost", **{contract.S3_ENDPOINT: endpoint,
                                                         contract.STORE: f"s3://{BUCKET}"})
        s3_res = run_child(["--child", "s3", "--size", str(args.s3_mib), *common, *big], s3_env)
        print(f"torch state dicts, s3://, {args.s3_mib} MiB...", flush=True)
        state_res["s3"] = (args.s3_mib * MiB, run_child(
            ["--child", "state", "--scheme", "s3", "--size", str(args.s3_mib), *common, *big],
            s3_env))
    frame.stop()
    quiet = (f"CPUs {idle_before:.0%} idle in the 3 s before the start; other processes used "
             f"{meter.others_seconds():.1f} CPU-s during the run")
    report(file_res, async_res, train_res, s3_res, state_res, skipped,
           f"{facts}. {versions()}", quiet, frame, args)


def report(file_res: dict[int, dict[str, Any]], async_res: dict[str, Any],
           train_res: dict[str, Any], s3_res: dict[str, Any],
           state_res: dict[str, tuple[int, dict[str, Any]]], skipped: list[str], facts: str,
           quiet: str, frame: Frame, args: argparse.Namespace) -> None:
    """Each section's table, the goals and notes: printed, as headlines, and written."""
    save_rows, load_rows, goals = file_io.file_table(file_res)
    async_rows, async_goals = async_save.async_table(async_res)
    train_rows, train_goals, train_worst = training.train_table(train_res)
    s3_rows, s3_goals = s3.s3_table(args.s3_mib * MiB, s3_res)
    state_rows, state_goals = state_dicts.state_table(state_res)
    goals += async_goals + train_goals + s3_goals + state_goals
    headlines(file_res, async_res, args.s3_mib * MiB, s3_res)
    which, r = min(train_worst, key=lambda p: p[1])
    headline("(c) checkpoint I/O", "training steps/s with an async save in flight / without "
             "(worst)", f"{r:.2f}x ({which})", f"≥ {GOAL_TRAINING}x", r >= GOAL_TRAINING)
    first = async_res["first_blocked"]
    resident = {mib // MiB: r["resident_after_evict"] for mib, r in file_res.items()}
    notes = [
        file_io.FILE_SAVE_RAW,
        "Cold loads: each file's pages evicted with posix_fadvise(DONTNEED) after fsync; "
        f"resident bytes right after, by fincore (None: fincore missing): {resident}.",
        f"First async save of a fresh Checkpoint (thread pools, DCP imports, the checkpoint "
        f"process group), not in the table: bytes {first['bytes'] * 1e3:.1f} ms, state dict "
        f"{first['state dict'] * 1e3:.0f} ms.",
        "s3:// loads: Shoal makes an object of 16 MiB or more ranged GETs, one per connection "
        "(SHOAL_RANGED_GET_MIN_MIB), because real S3 and GCS need parallel connections for "
        "their throughput; moto reads the whole object for every range request, so here the "
        "raw ranged GETs are slower than one raw GET (the reference row). Each load row is "
        "judged against the raw form of the same requests.",
        *skipped,
    ]
    sections = [
        ("## Sync save, file:// (the target folder's disk, fsync'd)", save_rows),
        ("## Load, file:// (verified; cold = pages evicted first)", load_rows),
        (f"## Async save, {args.async_mib} MiB: what the caller waits for", async_rows),
        (f"## Training ({TRAIN_THREADS} threads, MLP 512-1024-1024-10, batch 256) with an async "
         f"save of {args.async_mib} MiB in flight", train_rows),
        (f"## s3:// on loopback moto, {args.s3_mib} MiB", s3_rows),
        ("## torch state dicts: save_state_dict / load_state_dict (DCP, verified) against "
         "torch.save / torch.load", state_rows),
    ]
    body: list[str] = []
    for title, rows in sections:
        body += [title, "", *rows, ""]
    summary = ["Goals:", *[f"- {g}" for g in goals], "", "Notes:", *[f"- {n}" for n in notes]]
    print()
    print("\n".join(body + summary))
    print(f"whole benchmark {frame.elapsed:.0f} s; load average {frame.load[0]:.2f} at the "
          f"start, {frame.load_end[0]:.2f} at the end; {quiet}")
    if args.no_write:
        return
    load, load_end = frame.load, frame.load_end
    machine = (
        f"Machine: {facts}. Shoal commit {git_commit()}. Each section in its own subprocess, "
        f"rounds interleaved; median (min–max) of {args.rounds} rounds (256 MiB file://, async) "
        f"or {args.big_rounds} (larger files, training, s3://); whole run {frame.elapsed:.0f} s; "
        f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the "
        f"start, {load_end[0]:.2f} at the end; {quiet} (other work on the machine shows up as "
        "noise).")
    write_results("checkpoint-io", "Checkpoint I/O", command=frame.command, machine=machine,
                  body=[*body, *summary, ""])


if __name__ == "__main__":
    main()
