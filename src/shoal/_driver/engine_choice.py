"""Which engine a run starts on, chosen one of four ways that accept the same names
(`contract.ENGINES`) and refuse an unknown one with the same rule and fix: ``shoal run
--engine``, ``shoal.init(engine=)``, ``$SHOAL_ENGINE`` and the config file's ``engine:``.

Engines in `REMOTE` drive their runs elsewhere (a driver Job on the cluster); `shoal run` and
`shoal.run` both hand those to `shoal._driver.remote`. Engines in `SHARES_HOME` drive their runs
here, or with ``shoal run --detach`` in a driver of their own that shares this machine's home;
`DEPLOYABLE` are the engines `shoal deploy` renders for. The CLI asks these, never names an
engine.
"""

from __future__ import annotations

import os

from shoal import _contract as contract
from shoal.errors import SpecError

ENGINES = contract.ENGINES
REMOTE = ("kubernetes",)
SHARES_HOME = ("slurm",)
DEPLOYABLE = ("local", "kubernetes")
# Engines whose tasks run on the driver's machine, in its interpreter unless `--containers`
# puts each inside its image (elsewhere every task runs in its image already).
CONTAINABLE = ("local",)


def check_engine(field: str, value: object) -> str:
    """``value`` if it names an engine, else the one error every way of choosing raises."""
    if isinstance(value, str) and value in ENGINES:
        return value
    raise SpecError(field, value, f"is not an engine; the engines are {', '.join(ENGINES)}",
                    "choose one of them: local runs here, kubernetes submits the run's "
                    "driver to the cluster of your kubeconfig (with an s3:// or gs:// store), "
                    "slurm drives the run from here and runs its calls as Slurm jobs")


def engine_from_env() -> str:
    """``$SHOAL_ENGINE`` (set by the user or by `shoal.init`), else ``local``; checked."""
    value = os.environ.get(contract.ENGINE)
    return check_engine(contract.ENGINE, value) if value else "local"


def check_containers(engine: str, containers: bool | None) -> None:
    """``containers=True`` (``shoal run --containers``) only where tasks run on this machine."""
    if containers and engine not in CONTAINABLE:
        raise SpecError("containers", engine, "runs the tasks of the "
                        f"{' or '.join(CONTAINABLE)} engine inside their images; on {engine} "
                        "every task runs in its image already", "leave --containers out")


def is_remote(engine: str) -> bool:
    return engine in REMOTE
