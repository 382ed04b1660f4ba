"""Shared fixtures: every test gets its own SHOAL_HOME and file:// store; tests that need
S3 get a real S3-protocol server (moto's standalone HTTP server, started as a subprocess once
per session, so obstore talks real HTTP to it exactly as it would to S3 or MinIO); and no
thread a test starts outlives it (`no_thread_outlives_its_test`)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal import _contract as contract
from tests import nsys_stand_in
from tests.helpers import free_port, wait_until


@pytest.fixture(autouse=True)
def shoal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "shoal-home"
    monkeypatch.setenv(contract.HOME, str(home))
    monkeypatch.setenv(contract.STORE, (home / "store").as_uri())
    monkeypatch.setenv(contract.RETRY_BACKOFF, "0.05")
    # Each test has the machine to itself: its own lease table (runs of one test share it).
    monkeypatch.setenv(contract.MACHINE_DIR, str(tmp_path / "machine"))
    # What shoal.init()/init_from_config() set in os.environ: unset for the test, and put back
    # as it was afterwards even when the test sets it (a bare delenv of an unset variable
    # records nothing, so a test's init(engine="kubernetes") would leak into later tests,
    # module-scoped fixtures first).
    for name in (contract.ENGINE, contract.KUBE_SETTINGS, contract.SLURM_SETTINGS,
                 contract.LOG_LEVEL, contract.UI_URL, contract.IMAGE_REGISTRY,
                 contract.IMAGE_BUILDER, contract.CONTAINERS):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return home


@pytest.fixture
def stand_in_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``nsys`` first on PATH (tests/nsys_stand_in.py); returns the file its calls
    are logged to."""
    log = nsys_stand_in.install(tmp_path / "nsys")
    monkeypatch.setenv("PATH", nsys_stand_in.path_with(tmp_path / "nsys"))
    return log


# Threads that may outlive the test that started them, by name prefix, each with why: they
# are process-wide and started once, on first use, by whichever test comes first.
LASTING_THREADS: dict[str, str] = {
    "shoal-hash": "checkpoints/hashing.hash_pool(): the process's pool that checksums pieces",
    "shoal-prefault": "loaded_bytes: the process's one thread that faults in loaded pages",
}
# How long a test's threads get to end after it (a thread told to stop may need a poll).
THREAD_GRACE = 5.0
# The tiers held to it, each of which passes a whole run with it; add a tier once a whole
# run of it passes.
THREAD_CHECKED_TIERS = frozenset({"unit", "store", "kubernetes"})
TESTS = Path(__file__).resolve().parent


def _lasting(thread: threading.Thread) -> bool:
    return any(thread.name.startswith(prefix) for prefix in LASTING_THREADS)


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test that leaves a thread it started running (daemon or not): a leaked thread
    keeps polling, writing or holding a socket into later tests. Its threads get
    ``THREAD_GRACE`` seconds to end; ``LASTING_THREADS`` names the process-wide ones. Threads
    of module- and session-scoped fixtures are set up before this fixture and not counted.
    Only the tiers in ``THREAD_CHECKED_TIERS`` are held to it."""
    if Path(request.path).resolve().relative_to(TESTS).parts[0] not in THREAD_CHECKED_TIERS:
        yield
        return
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE
    left = [t for t in threading.enumerate() if t not in before and not _lasting(t)]
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t for t in left if t.is_alive()]
    if alive:
        pytest.fail(f"{len(alive)} thread(s) started by this test still run "
                    f"{THREAD_GRACE:g}s after it: {[t.name for t in alive]} (end them in the "
                    "test, or name a process-wide one in tests/conftest.py's LASTING_THREADS)",
                    pytrace=False)


BUCKET = "shoal-test"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.5):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, even if not with 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint of a moto S3 server holding bucket ``BUCKET``, with the env set to use it."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(f"the moto server to answer on {endpoint}", lambda: _answers(endpoint),
                   timeout=30, alive=[proc], detail=lambda: log.read_text()[-2000:])
        # moto does not check signatures, so a bare PUT creates the bucket.
        req = urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT")
        urllib.request.urlopen(req, timeout=5).close()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AWS_ACCESS_KEY_ID", "testing")
            mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            mp.setenv("AWS_REGION", "us-east-1")
            mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
            mp.setenv("NO_PROXY", "127.0.0.1,localhost")
            for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
                mp.delenv(name, raising=False)
            mp.setenv(contract.S3_ENDPOINT, endpoint)
            yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def s3_root(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix in the test bucket, so tests never see each other's objects."""
    # The session fixture's env may have been undone by a test's monkeypatch; set it again.
    monkeypatch.setenv(contract.S3_ENDPOINT, s3_server)
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}"


# Under `make test` the suite runs in two pytest-xdist workers (`-n 2`): most tests wait on
# processes far more than they compute. A tier whose tests share one resource of the machine
# runs in one worker, its tests one after another, each group named with why.
SERIAL_TIERS: dict[str, str] = {
    # One real Slurm per worker would be two sets of daemons; the Ray tests start clusters
    # whose Ray-chosen ports (the client server's 10001 and 23000+) are fixed per address.
    "slurm": "slurm-and-ray",
    "raycluster": "slurm-and-ray",
    # One containers storage and one Debian base per session: a second worker would make
    # both again, and two builders' layer caches would race on one machine's disk.
    "containers": "containers",
}
# A module whose tests build on each other's state runs as one unit too, in file order.
SERIAL_MODULES: dict[str, str] = {
    # Its later runs reuse the data step the first run cached in the module's SHOAL_HOME;
    # split across workers, each worker's home would start empty.
    "tests/process/test_pretrain_example.py": "the pretraining example's shared home",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Each test its own unit of work, but a serial tier's or module's tests one unit (xdist's
    ``--dist loadgroup`` cannot be used: with pytest 9 its group marks are lost). The
    largest unit is handed out first, so the serial tier starts at once on one worker
    while the other takes everything else."""
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module in SERIAL_MODULES:
                return module
            parts = nodeid.split("/")
            tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
            return SERIAL_TIERS.get(tier, nodeid)

    return TierScheduling(config, log)


# Tiers whose wall time the run's summary states, each with why: CI says how long they took
# (.ci/run). A serial tier's tests run one after another in one worker, so the sum of its
# setup, call and teardown times is its wall time.
TIMED_TIERS: dict[str, str] = {
    "containers": "real image builds and a Debian base from the mirror: the costliest set-up",
}
_tier_seconds: dict[str, float] = {}
_tier_tests: dict[str, set[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    parts = report.nodeid.split("/")
    tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    if tier in TIMED_TIERS:
        _tier_seconds[tier] = _tier_seconds.get(tier, 0.0) + report.duration
        _tier_tests.setdefault(tier, set()).add(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for tier, seconds in sorted(_tier_seconds.items()):
        terminalreporter.write_line(f"tier {tier}: {len(_tier_tests[tier])} tests took "
                                    f"{seconds:.1f}s (set-up and tear-down included)")
