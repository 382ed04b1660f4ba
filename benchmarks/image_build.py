"""Image builds: a user's image (Shoal copied in, six from PyPI, a source file) built cold and
warm by ``shoal image build`` and by ``Builder.build`` with podman, against ``podman build`` of
the same rendered Dockerfile by hand.

Run:
    CONTAINERS_CONF=... PYTHONPATH=src .venv/bin/python benchmarks/image_build.py [--rounds 3]

Every build runs in a containers storage of the benchmark's own (``CONTAINERS_STORAGE_CONF``,
in /dev/shm where there is room), on the Debian base ``shoal image base`` makes from the
``--tarball`` (default: the one the container tests keep, else made with mmdebstrap). Rows:

- podman build by hand: the build context ``Image.write_build_context`` writes, then
  ``podman build -v <host CA bundle>:/etc/ssl/certs/ca-certificates.crt:ro -t REF CTX`` (the
  CA mount: pip in a build needs the host's CA on this machine; a user would pass it so);
- shoal image build: the CLI, a process as a user starts it (loading the file, finding the
  builder, rendering, the tag, the host's settings as secrets, the build);
- Builder.build: ``find_builder("podman").build(image, log=...)`` in this process.

Cold: every image but the base removed and the layer cache pruned before the run, so each
row builds every step. Warm: the same row again at once (Shoal: the ref exists, nothing is
built; by hand: ``podman build`` finds every layer cached). Medians over ``--rounds``, rows
interleaved. pip downloads from PyPI are in the cold figures and vary with the network.

Writes ``benchmarks/results/<date>-cpu<N>-image-build.md``; about 4 minutes on 2 CPUs.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import REPO, child_env, headline, interleaved_rounds, shoal_cli
from _report import (
    Frame,
    attempt,
    closing_sections,
    failure_lines,
    machine_line,
    print_tables,
    ratio,
    runs_ok,
    spread,
    table,
    write_results,
)

sys.path.insert(0, str(REPO / "src"))

HAND = "podman build by hand"
CLI = "shoal image build"
API = "Builder.build"
ROWS = [HAND, CLI, API]
SECTION = "images"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PIPELINE = """import shoal
from pathlib import Path

image = (shoal.Image.from_debian_base().with_pip_packages("six")
         .with_source_file(Path(__file__).parent / "data.txt", "/app"))
env = shoal.TaskEnvironment(name="bench", image=image)
"""


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    if check and p.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {p.stderr[-2000:]}")
    return p


@contextmanager
def storage() -> Iterator[Path]:
    """A containers storage of this run's own, for podman and buildah (removed at the end)."""
    shm = Path("/dev/shm")
    use_shm = shm.is_dir() and shutil.disk_usage(shm).free >= 4 << 30
    root = Path(tempfile.mkdtemp(prefix="shoal-bench-images-", dir=shm if use_shm else None))
    conf = root / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{root / "graph"}"\n'
                    f'runroot = "{root / "run"}"\n')
    before = os.environ.get("CONTAINERS_STORAGE_CONF")
    os.environ["CONTAINERS_STORAGE_CONF"] = str(conf)
    try:
        yield root
    finally:
        podman("image", "unmount", "--all", check=False)
        shutil.rmtree(root, ignore_errors=True)
        if before is None:
            os.environ.pop("CONTAINERS_STORAGE_CONF", None)
        else:
            os.environ["CONTAINERS_STORAGE_CONF"] = before


def default_tarball() -> Path:
    """The base tarball the container tests keep in pytest's temp root (made if missing)."""
    return Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}" / \
        f"shoal-debian-base-bookworm-{PYTHON}.tar"


def clear(base: str) -> None:
    """Every image but the base, and every cached layer, gone."""
    for ref in podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        if ref != base:
            podman("rmi", "-f", ref, check=False)
    podman("image", "prune", "-f", check=False)  # the layer cache: untagged build steps
    left = podman("images", "-a", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    if left != [base]:
        raise RuntimeError(f"images left after clearing: {left}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tarball", type=Path, default=None,
                   help="the Debian base's rootfs tarball (made there if missing)")
    args = p.parse_args()
    if shutil.which("podman") is None:
        print("image_build: skipped: podman is not installed (apt-get install podman runc)")
        return
    frame = Frame.start("image_build.py")
    if not os.environ.get("CONTAINERS_CONF"):
        print("CONTAINERS_CONF is unset: on machines where crun or podman's default ulimits "
              "fail, point it at a containers.conf (tests/containers/README.md)", flush=True)
    import shoal
    from shoal._engines.images import find_builder
    from shoal.cli.main import main as cli

    with storage() as root:
        tarball = args.tarball or default_tarball()
        started = time.perf_counter()
        code = cli(["image", "base", "--python", PYTHON, "--builder", "podman", "--tarball",
                    str(tarball), "--log", str(root / "base.log")])
        if code != 0:
            raise SystemExit((root / "base.log").read_text()[-3000:])
        base_s = time.perf_counter() - started
        base = f"docker.io/library/python:{PYTHON}-slim-bookworm"
        project = root / "project"
        project.mkdir()
        (project / "data.txt").write_text("bench\n")
        (project / "pipeline.py").write_text(PIPELINE)
        image = (shoal.Image.from_debian_base().with_pip_packages("six")
                 .with_source_file(project / "data.txt", "/app"))
        context = image.write_build_context(root / "hand-context")
        builder = find_builder("podman")
        env = child_env()

        def build(row: str) -> float:
            log = root / "logs" / f"{row.replace(' ', '-')}.log"
            log.parent.mkdir(exist_ok=True)
            t0 = time.perf_counter()
            if row == HAND:
                podman("build", "-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", "-t", "bench-hand:1",
                       str(context))
            elif row == CLI:
                out = subprocess.run([*shoal_cli(), "image", "build", str(project / "pipeline.py"),
                                      "--builder", "podman", "--out", str(root / "out")],
                                     capture_output=True, text=True, env=env, check=False)
                if out.returncode != 0:
                    raise RuntimeError(out.stdout[-1500:] + out.stderr[-1500:])
            else:
                builder.build(image, log=log)
            return time.perf_counter() - t0

        def measure(row: str) -> tuple[float, float] | str:
            clear(base)
            cold = attempt(f"{row} cold", lambda: build(row))
            if isinstance(cold, str):
                return cold
            warm = attempt(f"{row} warm", lambda: build(row))
            if isinstance(warm, str):
                return warm
            print(f"  {row}: cold {cold:.2f} s, warm {warm:.2f} s", flush=True)
            return cold, warm

        got, failed = interleaved_rounds(ROWS, args.rounds, measure)
    frame.stop()
    report(frame, args, base_s, tarball, got, failed)


def report(frame: Frame, args: argparse.Namespace, base_s: float, tarball: Path,
           got: dict[str, list[tuple[float, float]]], failed: dict[str, list[str]]) -> None:
    cold = {r: [c for c, _ in got.get(r, [])] for r in ROWS}
    warm = {r: [w for _, w in got.get(r, [])] for r in ROWS}

    def med(values: list[float]) -> float | None:
        return sorted(values)[len(values) // 2] if values else None

    rows = [f"| {r} | {runs_ok(got.get(r, []), failed.get(r, []))} | {spread(cold[r])} | "
            f"{ratio(med(cold[r]), med(cold[HAND]))} | {spread(warm[r])} | "
            f"{ratio(med(warm[r]), med(warm[HAND]))} |" for r in ROWS]
    head = ["row", "runs ok", "cold s", f"vs {HAND}", "warm s", f"vs {HAND}"]
    tables = {"Cold and warm builds (median, min–max)": table(head, rows)}
    print_tables(tables)
    goals = []
    for r in (CLI, API):
        c, w = ratio(med(cold[r]), med(cold[HAND])), ratio(med(warm[r]), med(warm[HAND]))
        goals.append(f"{r}: cold {c} of {HAND}, warm {w}")
        headline(SECTION, f"{r} / {HAND}, cold build", c)
        headline(SECTION, f"{r} / {HAND}, warm (cached) build", w)
    failures = failure_lines(failed)
    frame.print_outcome(goals, failures)
    body = [
        "## Cold and warm builds", "", *tables["Cold and warm builds (median, min–max)"], "",
        f"The image: `Image.from_debian_base().with_pip_packages(\"six\").with_source_file("
        f"...)` with Shoal copied in from this checkout and its runtime dependencies installed "
        f"(psutil, obstore, pyyaml, crc32c, packaging), on the Debian base imported in "
        f"{base_s:.1f} s from {tarball.name}. Cold: all images but the base removed and the "
        "layer cache pruned before the run. Warm: the same row again at once. podman build "
        "by hand builds the context `write_build_context` wrote, with the host's CA bundle "
        "mounted (`-v`); Shoal passes it as a build secret instead.", "",
        "## Notes", "",
        "- Warm: Shoal asks podman whether the ref exists (`podman image exists`) and builds "
        "nothing; by hand, `podman build` walks every step's cache. The CLI row also pays the "
        "interpreter start and loading the user's file.",
        "- Cold figures include pip's downloads from PyPI (through this machine's proxy): the "
        "network's noise is in them.", "",
        "## Goals", "", *closing_sections(goals, failures)]
    write_results("image-build", "Image builds: shoal vs podman build by hand",
                  command=frame.command, machine=machine_line(
                      f". podman {podman('--version').stdout.split()[-1]}; {args.rounds} "
                      f"rounds, rows interleaved. Whole run {frame.elapsed:.0f} s; "
                      f"{frame.load_note()}."), body=body)


if __name__ == "__main__":
    main()
