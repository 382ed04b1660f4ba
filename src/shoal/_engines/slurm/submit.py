"""The submitting side of the Slurm engine (`RemoteDriver`): ``shoal run --detach`` submits the
run's driver as its own small job, and ``shoal cancel`` of a run whose driver died stops the
jobs it left.

The driver job shares this machine's home (the filesystem the nodes share), so it keeps the
run's records itself, where this machine reads them: nothing is recorded here or followed
through the store, unlike a Kubernetes driver Job (see `RemoteDriver`).
"""

from __future__ import annotations

import os
from pathlib import Path

from shoal import _contract as contract
from shoal._engines.base import RemoteDriver
from shoal._engines.slurm import client
from shoal._engines.slurm.client import SbatchRefused
from shoal._engines.slurm.engine import slurm_settings
from shoal._engines.slurm.script import render_driver, run_prefix
from shoal._spec.call import EnvSpec
from shoal.errors import EngineError


class SlurmRemoteDriver(RemoteDriver):
    name = "slurm"

    def __init__(self, *, store: str, home: Path) -> None:
        self.store = store  # the settings may name another, read when a job is submitted
        self.home = home

    def connect(self) -> str:
        client.check_installed()
        client.ping()
        return "the Slurm cluster of this machine"

    def how_to_stop(self, run: str) -> str:
        return (f"shoal cancel {run}, or scancel the jobs `squeue --me` lists with names "
                f"starting {run_prefix(run)}")

    def detach(self, *, run: str, env: EnvSpec, argv: list[str]) -> str:
        """The run's driver as its own small job; the records are kept by that job under
        ``home`` (it must be on the filesystem the nodes share)."""
        job = submit_driver(run=run, env=env, argv=argv, home=self.home, store=self.store)
        return f"Slurm job {job} (log: {self.home / 'runs' / run / 'driver.log'})"

    def clean_up(self, run: str) -> str:
        jobs = cancel_jobs_of(run)
        return f"run {run} crashed (its driver is gone); " + (
            f"cancelled its Slurm job(s) {', '.join(jobs)}" if jobs
            else "no Slurm job of it is left")


def submit_driver(*, run: str, env: EnvSpec, argv: list[str], home: Path,
                  store: str) -> str:
    """``shoal run --detach``: the run's driver as its own small job; its id. The records
    are kept by that job under ``home`` (it must be on the filesystem the nodes share)."""
    client.check_installed()
    settings = slurm_settings(store)
    pt = env.pod_template
    placement = settings.placement_for(env.name, pt.priority_class if pt is not None else None)
    exports = {contract.HOME: str(home), contract.STORE: settings.store or store}
    if os.environ.get(contract.SLURM_SETTINGS):
        exports[contract.SLURM_SETTINGS] = os.environ[contract.SLURM_SETTINGS]
    log = home / "runs" / run / "driver.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    script = render_driver(run=run, env=env, placement=placement, settings=settings,
                           log=str(log), exports=exports, argv=argv)
    try:
        return client.sbatch(script, client.submit_environ(os.environ))
    except SbatchRefused as e:
        raise EngineError(f"sbatch refused the driver job of run {run}: {e}") from None


def cancel_jobs_of(run: str) -> list[str]:
    """scancel every job Slurm still holds for ``run`` (a run whose driver is gone); their
    ids."""
    jobs = [j.id for j in client.my_jobs(run_prefix(run)) if j.state not in client.TERMINAL]
    for job in jobs:
        client.scancel(job)
    return jobs


