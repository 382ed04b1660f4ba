"""Store backends side by side: obstore (Shoal's s3:// backend) vs fsspec/s3fs, and file://.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/store_backends.py

It starts moto's S3 server on loopback itself, then measures, against that one server:
- throughput: 64 MiB as 8 objects of 8 MiB, put then get, one at a time;
- latency: 200 objects of 4 KiB, put then get, one at a time (mean, p50, p99);
- the same 200 small objects put as one batch, each client at its best (obstore: Shoal's
  put_dir thread pool of 8; s3fs: one ``pipe({...})`` call, its own asyncio fan-out);
and for file://, Shoal's ``put_bytes`` (temp file, fsync, rename, folder fsync) against the
same without the folder fsync, a raw ``open/write/fsync`` and a raw ``open/write``, to show
what atomicity and durability cost.

The server is moto (Python), so remote figures measure client overhead plus a slow server:
ratios are what to read, not absolute MB/s. Each figure is the median of 3 rounds.
Writes ``benchmarks/results/<date>-cpu<N>-store-backends.md``; takes well under a minute.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _common import headline, moto_server  # benchmarks/_common.py, next to this script
from _report import Frame, results_md, save_results, table

from shoal import _contract as contract
from shoal._storage.store import Store, join, open_store, put_dir

MiB = 1024 * 1024
BIG, BIG_N = 8 * MiB, 8
SMALL, SMALL_N = 4096, 200
ROUNDS = 3
BUCKET = "shoal-bench"
_fresh = itertools.count()  # new object names for the file:// runs




def median_time(fn: Callable[[], object]) -> float:
    times = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def latencies(fn: Callable[[int], object]) -> list[float]:
    """Per-call seconds of SMALL_N calls, from the median round (by total).

    Every call gets a new number, so every put creates a new object, as content-addressed
    writes do (replacing an existing file costs differently on some filesystems).
    """
    rounds = []
    for r in range(ROUNDS):
        one = []
        for i in range(r * SMALL_N, (r + 1) * SMALL_N):
            t = time.perf_counter()
            fn(i)
            one.append(time.perf_counter() - t)
        rounds.append(one)
    return sorted(rounds, key=sum)[ROUNDS // 2]


def lat_row(values: list[float]) -> tuple[float, float, float]:
    ms = sorted(v * 1000 for v in values)
    return statistics.mean(ms), ms[len(ms) // 2], ms[min(len(ms) - 1, int(len(ms) * 0.99))]


class Client:
    """One way to talk to a store: put/get bytes by key, and a batch put of small objects.

    ``batch(objs)`` does any set-up and returns the timed action.
    """

    def __init__(
        self,
        name: str,
        put: Callable[[str, bytes], object],
        get: Callable[[str], bytes],
        batch: Callable[[dict[str, bytes]], Callable[[], object]],
    ) -> None:
        self.name, self.put, self.get, self.batch = name, put, get, batch


def shoal_client(store: Store, tmp: Path) -> Client:
    def batch(objs: dict[str, bytes]) -> Callable[[], object]:
        # put_dir is Shoal's batch path: files from a folder, store.parallelism at a time.
        folder = Path(tempfile.mkdtemp(dir=tmp))
        for k, v in objs.items():
            (folder / k).write_bytes(v)
        return partial(put_dir, store, folder, join(store.root, "batch"))

    return Client(
        "shoal/obstore",
        lambda k, d: store.put_bytes(join(store.root, k), d),
        lambda k: store.get_bytes(join(store.root, k)),
        batch,
    )


def s3fs_client(endpoint: str, prefix: str) -> Client:
    import s3fs

    fs = s3fs.S3FileSystem(
        key="bench",
        secret="bench",
        endpoint_url=endpoint,
        client_kwargs={"region_name": "us-east-1"},
        use_listings_cache=False,
    )
    return Client(
        "fsspec/s3fs",
        lambda k, d: fs.pipe_file(f"{prefix}/{k}", d),
        lambda k: bytes(fs.cat_file(f"{prefix}/{k}")),
        lambda objs: partial(fs.pipe, {f"{prefix}/batch/{k}": v for k, v in objs.items()}),
    )


def measure(client: Client, tag: str) -> dict[str, float]:
    big = os.urandom(BIG)
    small = os.urandom(SMALL)
    client.put(f"{tag}/warm", small)  # connection set-up is not what we measure
    client.get(f"{tag}/warm")
    out: dict[str, float] = {}
    put_s = median_time(lambda: [client.put(f"{tag}/big/{i}", big) for i in range(BIG_N)])
    get_s = median_time(lambda: [client.get(f"{tag}/big/{i}") for i in range(BIG_N)])
    out["big put MiB/s"] = BIG * BIG_N / MiB / put_s
    out["big get MiB/s"] = BIG * BIG_N / MiB / get_s
    put_mean, put_p50, put_p99 = lat_row(latencies(lambda i: client.put(f"{tag}/s/{i}", small)))
    get_mean, get_p50, get_p99 = lat_row(latencies(lambda i: client.get(f"{tag}/s/{i}")))
    out |= {
        "small put mean ms": put_mean,
        "small put p50 ms": put_p50,
        "small put p99 ms": put_p99,
        "small get mean ms": get_mean,
        "small get p50 ms": get_p50,
        "small get p99 ms": get_p99,
    }
    objs = {f"o{i}": small for i in range(SMALL_N)}
    out["small batch put s"] = median_time(client.batch(objs))
    return out


def local_rows(tmp: Path) -> dict[str, dict[str, float]]:
    store = open_store((tmp / "filestore").as_uri())
    raw = tmp / "raw"
    raw.mkdir()
    big, small = os.urandom(BIG), os.urandom(SMALL)

    def raw_write(path: Path, data: bytes, sync: bool) -> None:
        with open(path, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())

    def no_dir_fsync(path: Path, data: bytes) -> None:
        # What put_bytes does, less the folder fsync: the cost of that one call.
        tmp = path.with_name(".tmp-" + path.name)
        raw_write(tmp, data, True)
        os.replace(tmp, path)

    ways: dict[str, Callable[[str, bytes], None]] = {
        "shoal put_bytes": lambda k, d: store.put_bytes(join(store.root, k), d),
        "tmp+fsync+rename": lambda k, d: no_dir_fsync(raw / k.replace("/", "_"), d),
        "raw write+fsync": lambda k, d: raw_write(raw / k.replace("/", "_"), d, True),
        "raw write": lambda k, d: raw_write(raw / k.replace("/", "_"), d, False),
    }
    rows: dict[str, dict[str, float]] = {}
    for name, put in ways.items():
        secs = median_time(partial(_put_many, put, big))
        mean, p50, p99 = lat_row(latencies(partial(_put_one, put, small)))
        rows[name] = {
            "big put MiB/s": BIG * BIG_N / MiB / secs,
            "small put mean ms": mean,
            "small put p50 ms": p50,
            "small put p99 ms": p99,
        }
    return rows


def _put_many(put: Callable[[str, bytes], None], data: bytes) -> None:
    for _ in range(BIG_N):
        put(f"big{next(_fresh)}", data)


def _put_one(put: Callable[[str, bytes], None], data: bytes, i: int) -> None:
    put(f"s{i}", data)


def ratio_table(rows: dict[str, dict[str, float]], base: str, higher_is_better: set[str]) -> str:
    names = list(rows)
    metrics = list(rows[names[0]])
    lines = table(["metric", *names, *(f"{n} vs {base}" for n in names if n != base)])
    for m in metrics:
        cells = [f"{rows[n][m]:.2f}" for n in names]
        ratios = []
        for n in names:
            if n == base:
                continue
            r = rows[n][m] / rows[base][m] if m in higher_is_better else rows[base][m] / rows[n][m]
            ratios.append(f"{r:.2f}x")
        lines.append(f"| {m} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    frame = Frame("PYTHONPATH=src .venv/bin/python benchmarks/store_backends.py",
                  os.getloadavg())
    faster = {"big put MiB/s", "big get MiB/s"}
    with tempfile.TemporaryDirectory() as tmpdir, moto_server(BUCKET) as endpoint:
        tmp = Path(tmpdir)
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1",
            NO_PROXY="127.0.0.1,localhost",
        )
        os.environ[contract.S3_ENDPOINT] = endpoint
        remote = {
            "fsspec/s3fs": measure(s3fs_client(endpoint, f"{BUCKET}/s3fs"), "r"),
            "shoal/obstore": measure(shoal_client(open_store(f"s3://{BUCKET}/obstore"), tmp), "r"),
        }
        local = local_rows(tmp)
    frame.stop()
    report(remote, local, faster, frame)


def report(remote: dict[str, dict[str, float]], local: dict[str, dict[str, float]],
           faster: set[str], frame: Frame) -> None:
    """The two tables, printed and written; the headlines."""
    # Ratios read "how many times better than the baseline" (throughput up, time down).
    machine = (f"Python {sys.version.split()[0]}; {_versions()}; loopback moto server; "
               f"median of {ROUNDS} rounds; whole run {frame.elapsed:.0f} s; load average "
               f"{frame.load[0]:.1f} at the start (other work on the machine shows up as "
               "noise).")
    text = results_md("Store backends", command=frame.command, machine=machine, body=[
        f"## s3:// on loopback moto ({BIG_N} x {BIG // MiB} MiB; {SMALL_N} x "
        f"{SMALL // 1024} KiB)",
        "",
        ratio_table(remote, "fsspec/s3fs", faster),
        "",
        "## file:// (tmp on this machine's disk)",
        "",
        ratio_table(local, "raw write+fsync", faster),
        "",
        "Ratios: how many times better than the baseline column (higher throughput, or "
        "lower time). moto is a Python server and bounds the remote figures; read the "
        "ratios, not the absolute numbers.",
        "",
    ])
    print(text)
    headlines(remote, local)
    save_results("store-backends", text)


def headlines(remote: dict[str, dict[str, float]], local: dict[str, dict[str, float]]) -> None:
    """The summary's figures (``run_all.py``), as ratios "times better than the baseline"."""
    section = "store backends"
    mine, base = remote["shoal/obstore"], remote["fsspec/s3fs"]
    for figure, metric, higher in (
            (f"s3:// put {BIG // MiB} MiB objects, MiB/s", "big put MiB/s", True),
            (f"s3:// get {BIG // MiB} MiB objects, MiB/s", "big get MiB/s", True),
            (f"s3:// put {SMALL // 1024} KiB objects, mean latency", "small put mean ms", False),
            (f"s3:// get {SMALL // 1024} KiB objects, mean latency", "small get mean ms", False)):
        r = mine[metric] / base[metric] if higher else base[metric] / mine[metric]
        headline(section, f"shoal/obstore vs fsspec/s3fs (loopback moto), {figure}",
                 f"{r:.2f}x better")
    r = local["shoal put_bytes"]["big put MiB/s"] / local["raw write+fsync"]["big put MiB/s"]
    headline(section, f"file:// put_bytes (atomic) / raw write+fsync, {BIG // MiB} MiB, MiB/s",
             f"{r:.2f}x")


def _versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{p} {version(p)}" for p in ("obstore", "s3fs", "moto"))


if __name__ == "__main__":
    main()
