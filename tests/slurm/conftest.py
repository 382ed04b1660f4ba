"""The `slurm_cluster` fixture: one real Slurm (munged, slurmctld, named slurmd nodes on
loopback) for the whole session, with SLURM_CONF pointing at it. It skips, naming what is
missing, where Slurm cannot run here; with SHOAL_REQUIRE_SLURM=1 (set by .ci/run) it fails."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import NoReturn

import pytest

from tests.slurm import cluster as slurm


def _unavailable(why: str) -> NoReturn:
    if os.environ.get("SHOAL_REQUIRE_SLURM") == "1":
        pytest.fail(f"{why}\n(SHOAL_REQUIRE_SLURM=1: the Slurm tier must run here)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[slurm.SlurmCluster]:
    try:
        cluster = slurm.start()
    except slurm.Unavailable as e:
        _unavailable(str(e))
    except TimeoutError as e:
        _unavailable(f"the test Slurm did not come up: {e}")
    print(f"\nslurm test cluster: {len(cluster.nodes)} nodes up in {cluster.startup_s:.2f}s "
          f"under {cluster.root}", file=sys.stderr)
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name in [k for k in os.environ if k.startswith("SLURM_")]:
                mp.delenv(name)  # an outer job's SLURM_JOB_ID would steer srun into it
            mp.setenv("SLURM_CONF", str(cluster.conf))
            yield cluster
    finally:
        cluster.stop()
        cluster.remove()


@pytest.fixture(autouse=True)
def _no_jobs_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's jobs end with it, so the next test finds every node free."""
    yield
    if "slurm_cluster" in request.fixturenames:
        cluster: slurm.SlurmCluster = request.getfixturevalue("slurm_cluster")
        cluster.cancel_all()
        # Start the next test with all nodes back (a node-loss test may have left one down).
        cluster.heal()
