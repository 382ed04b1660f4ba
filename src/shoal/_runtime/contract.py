"""THE environment-variable contract: every variable that crosses a process boundary.

The local engine, the Kubernetes engine (later), the node launcher, the worker and ``ctx()``
read and write these variables through this module only; no other module spells their names.
A Kubernetes pod and a local worker see the same variables, which is what lets one launcher and
one worker serve both engines.

Groups:
- where things live: SHOAL_HOME (local records, logs), SHOAL_STORE (object-store root URI);
- who this process is: run, action, attempt, environment, the user's code file;
- how to reach the controller that runs the run (local engine: a Unix socket path);
- the topology of a clustered task (node rank, node count, processes per node, master
  address/port, restart attempt), next to the variables torchrun itself defines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

PREFIX = "SHOAL_"  # every Shoal variable starts with it; users may not set such variables

# --- where things live -------------------------------------------------------------------
HOME = "SHOAL_HOME"  # local state: SQLite records, logs, the default file:// store
STORE = "SHOAL_STORE"  # object-store root URI (file:///..., s3://bucket/prefix, gs://...)
ENGINE = "SHOAL_ENGINE"  # default engine for `shoal run` ("local" or "kubernetes")
# S3-compatible endpoint override (a MinIO or loopback server); credentials use the standard
# AWS_* variables, which Shoal passes through untouched.
S3_ENDPOINT = "SHOAL_S3_ENDPOINT"

# --- who this process is -----------------------------------------------------------------
RUN = "SHOAL_RUN"
ACTION = "SHOAL_ACTION"
ATTEMPT = "SHOAL_ATTEMPT"  # task retry number, 0-based
ENV_NAME = "SHOAL_ENV"
CODE_FILE = "SHOAL_CODE_FILE"  # path of the user's file that defines the tasks
WORKER_ID = "SHOAL_WORKER_ID"
CONTROLLER = "SHOAL_CONTROLLER"  # where the worker reports (local engine: Unix socket path)
LOG_LEVEL = "SHOAL_LOG_LEVEL"
# First delay between task retries, in seconds (doubles each retry, capped at 30 s).
RETRY_BACKOFF = "SHOAL_RETRY_BACKOFF"

# --- topology of a clustered task (Shoal's own names) ---------------------------------------
NODE_RANK = "SHOAL_NODE_RANK"
NNODES = "SHOAL_NNODES"
NPROC_PER_NODE = "SHOAL_NPROC_PER_NODE"
MASTER_ADDR = "SHOAL_MASTER_ADDR"
MASTER_PORT = "SHOAL_MASTER_PORT"
RESTART_ATTEMPT = "SHOAL_RESTART_ATTEMPT"  # whole-group restarts so far
CHECKPOINT_URI = "SHOAL_CHECKPOINT_URI"

# --- what torchrun defines for each rank (read by DDP, FSDP, Lightning, Accelerate...) -------
TORCH_RANK = "RANK"
TORCH_LOCAL_RANK = "LOCAL_RANK"
TORCH_WORLD_SIZE = "WORLD_SIZE"
TORCH_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
TORCH_GROUP_RANK = "GROUP_RANK"
TORCH_MASTER_ADDR = "MASTER_ADDR"
TORCH_MASTER_PORT = "MASTER_PORT"


def home() -> Path:
    """The local state folder: ``$SHOAL_HOME``, else ``~/.shoal``."""
    value = os.environ.get(HOME)
    return Path(value).expanduser() if value else Path.home() / ".shoal"


def store_uri() -> str:
    """The object-store root: ``$SHOAL_STORE``, else ``file://<home>/store``."""
    value = os.environ.get(STORE)
    if value:
        return value
    return (home() / "store").resolve().as_uri()


def retry_backoff() -> float:
    try:
        return max(0.0, float(os.environ.get(RETRY_BACKOFF, "1.0")))
    except ValueError:
        return 1.0


@dataclass(frozen=True)
class WorkerEnv:
    """What a local worker process is told at start-up (the variables above, typed)."""

    home: str
    store: str
    env_name: str
    code_file: str
    worker_id: str
    controller: str
    run: str

    _NAMES: ClassVar[dict[str, str]] = {
        "home": HOME,
        "store": STORE,
        "env_name": ENV_NAME,
        "code_file": CODE_FILE,
        "worker_id": WORKER_ID,
        "controller": CONTROLLER,
        "run": RUN,
    }

    def to_env(self) -> dict[str, str]:
        return {self._NAMES[f.name]: str(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerEnv:
        env = os.environ if environ is None else environ
        missing = [v for v in cls._NAMES.values() if v not in env]
        if missing:
            raise RuntimeError(
                f"this process was not started by a Shoal engine: {', '.join(missing)} not set"
            )
        return cls(**{k: env[v] for k, v in cls._NAMES.items()})
