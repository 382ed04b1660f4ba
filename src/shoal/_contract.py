"""THE environment-variable contract: every variable that crosses a process boundary.

The engines (local, Kubernetes, Slurm), the node launcher, a Slurm allocation, the worker and
``ctx()`` read and write these variables through this module only; no other module spells
their names. A local node, a Kubernetes pod and a Slurm node see the same variables, which is
what lets one launcher serve every engine. It is the foundation layer: it imports nothing.

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
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import ClassVar

PREFIX = "SHOAL_"  # every Shoal variable starts with it; users may not set such variables

# --- where things live -------------------------------------------------------------------
HOME = "SHOAL_HOME"  # local state: SQLite records, logs, the default file:// store
STORE = "SHOAL_STORE"  # object-store root URI (file:///..., s3://bucket/prefix, gs://...)
ENGINE = "SHOAL_ENGINE"  # default engine of `shoal run` and `shoal.run` (one of ENGINES)
# The engines a run can start on: `--engine`, `shoal.init(engine=)`, SHOAL_ENGINE and the
# config file's ``engine:`` accept exactly these (`shoal._driver.engine_choice`).
ENGINES = ("local", "kubernetes", "slurm")
# The Kubernetes engine's settings file (YAML of KubeConfig fields) on the submitting machine:
# the default of `--kube-settings`; `shoal.init(kube_settings=)` sets it.
KUBE_SETTINGS = "SHOAL_KUBE_SETTINGS"
# The Slurm engine's settings file (YAML of SlurmSettings fields): the default of
# `--slurm-settings`; `shoal.init(slurm_settings=)` sets it.
SLURM_SETTINGS = "SHOAL_SLURM_SETTINGS"
# The config file `shoal.init_from_config()` reads when given no path (see `_driver/config.py`).
CONFIG = "SHOAL_CONFIG"
# Base URL of `shoal ui`; a run's page is `<base>/runs/<run name>` (see `run_url`).
UI_URL = "SHOAL_UI_URL"
DEFAULT_UI_PORT = 8484
# Registry of built `shoal.Image`s that name none themselves (config key image.registry).
IMAGE_REGISTRY = "SHOAL_IMAGE_REGISTRY"
# The OCI builder of images: "docker", "podman" or "buildah" (config key image.builder;
# `shoal image build --builder`); unset: the first present (shoal._engines.images).
IMAGE_BUILDER = "SHOAL_IMAGE_BUILDER"
# Where a run's metrics are forwarded while it runs: "tensorboard:DIR,wandb[:rank0]" (the
# syntax of `shoal run --metrics`; parsed in `shoal._driver.bridges.spec`).
METRICS_BRIDGES = "SHOAL_METRICS_BRIDGES"
# Seconds between the engine's samples of each rank's CPU, memory and GPUs; "0": none taken.
SYSTEM_METRICS_INTERVAL = "SHOAL_SYSTEM_METRICS_INTERVAL"
DEFAULT_SYSTEM_METRICS_INTERVAL = 2.0
# The folder of this machine's lease table, which every local run of this user shares (the
# CPUs, memory and GPUs of the machine are one pool across runs): default /tmp/shoal-<uid>,
# per user and not per SHOAL_HOME, since runs with different homes share the machine.
MACHINE_DIR = "SHOAL_MACHINE_DIR"
# What the local engine may use of this machine: "cpu=4,memory=16Gi,gpu=1" (each key optional;
# an omitted one is detected). Runs sharing a machine must agree on it.
MACHINE_CAPACITY = "SHOAL_MACHINE_CAPACITY"
# "1": the local engine runs each task process (a plain call's worker, a gang's node launcher)
# inside its environment's image, built on demand, held to its resources as the container's
# limits (`shoal run --containers`, `shoal.init(containers=True)`, config `containers: true`).
CONTAINERS = "SHOAL_CONTAINERS"
# S3-compatible endpoint override (a MinIO or loopback server); credentials use the standard
# AWS_* variables, which Shoal passes through untouched.
S3_ENDPOINT = "SHOAL_S3_ENDPOINT"
# Objects of at least this many MiB (s3://, gs://) download as concurrent ranged GETs, one per
# connection (8-64 MiB each): what S3 and GCS need for more than one connection's throughput.
# "off": one GET whatever the size, for a server that reads the whole object for every range
# request (moto does, so on it one GET is faster). Read when a store is opened.
RANGED_GET_MIN_MIB = "SHOAL_RANGED_GET_MIN_MIB"
DEFAULT_RANGED_GET_MIN_MIB = 16

# --- who this process is -----------------------------------------------------------------
RUN = "SHOAL_RUN"
ACTION = "SHOAL_ACTION"
ATTEMPT = "SHOAL_ATTEMPT"  # task retry number, 0-based
ENV_NAME = "SHOAL_ENV"
CODE_FILE = "SHOAL_CODE_FILE"  # path of the user's file that defines the tasks
WORKER_ID = "SHOAL_WORKER_ID"
CONTROLLER = "SHOAL_CONTROLLER"  # where the worker reports (local engine: Unix socket path)
LOG_LEVEL = "SHOAL_LOG_LEVEL"
USER_LOG_LEVEL = "SHOAL_USER_LOG_LEVEL"  # the level of `shoal.logger` in task processes
# First delay between task retries, in seconds (doubles each retry, capped at 30 s).
RETRY_BACKOFF = "SHOAL_RETRY_BACKOFF"
# "1" (`shoal --debug`): tracebacks keep Shoal's own frames, in the CLI and in task processes.
DEBUG = "SHOAL_DEBUG"

# --- topology of a clustered task (Shoal's own names) ---------------------------------------
NODE_RANK = "SHOAL_NODE_RANK"
NNODES = "SHOAL_NNODES"
NPROC_PER_NODE = "SHOAL_NPROC_PER_NODE"
MASTER_ADDR = "SHOAL_MASTER_ADDR"
MASTER_PORT = "SHOAL_MASTER_PORT"
RESTART_ATTEMPT = "SHOAL_RESTART_ATTEMPT"  # whole-group restarts so far
# Why this start of the gang began: a key of `shoal._spec.call.START_CAUSES` (`ctx().start_cause`).
START_CAUSE = "SHOAL_START_CAUSE"
# An elastic gang's fewest and most nodes (`ctx().min_nnodes`, `ctx().max_nnodes`; a Slurm
# allocation restarts on the nodes still alive while at least the fewest are).
MIN_NNODES = "SHOAL_MIN_NNODES"
MAX_NNODES = "SHOAL_MAX_NNODES"
# The same count under the name JobSet gives it, which code written for Flyte 2 reads.
JOBSET_RESTART_ATTEMPT = "JOBSET_RESTART_ATTEMPT"
CHECKPOINT_URI = "SHOAL_CHECKPOINT_URI"
TASK = "SHOAL_TASK"  # the task every rank runs ("env.fn")
RUNTIME = "SHOAL_RUNTIME"  # "torch" | "jax"
RDZV_BACKEND = "SHOAL_RDZV_BACKEND"  # "static" | "c10d"
TORCH_MAX_RESTARTS = "SHOAL_TORCH_MAX_RESTARTS"  # torchrun's in-node restarts
LAUNCH = "SHOAL_LAUNCH"  # "direct" (ranks started by the launcher) | "torchrun"
IO = "SHOAL_IO"  # store URI of this attempt's folder: inputs.json in, outputs and failures out
RANK_LOG_DIR = "SHOAL_RANK_LOG_DIR"  # if set, each rank writes rank<N>.log there (local engine)
COLLECTIVE_TIMEOUT = "SHOAL_COLLECTIVE_TIMEOUT"  # seconds; default timeout of process groups
GRACE_PERIOD = "SHOAL_GRACE_PERIOD"  # seconds between SIGTERM and SIGKILL of ranks
MASTER_WAIT = "SHOAL_MASTER_WAIT"  # seconds a node waits for the master's address to resolve
NODE_ADDR = "SHOAL_NODE_ADDR"  # the address other nodes reach this node at ("": its hostname)
# The local engine's simulated nodes in network namespaces, so that a link between two of
# them can be cut (tests/faults): "ns0=10.77.0.1,ns1=10.77.0.2" runs node i under
# `ip netns exec` in the i-th namespace, reached at the i-th address (node 0's is the master
# address). Unset: every node on loopback, each at its own 127.0.0.<i+1>.
LOCAL_NODE_NETNS = "SHOAL_LOCAL_NODE_NETNS"
# An inherited pipe end whose EOF means the local engine died: its nodes then end themselves.
LIFELINE_FD = "SHOAL_LIFELINE_FD"
# An inherited socket from a node launcher to the local engine (JSON lines): the launcher says
# when its ranks of a start ended, and is told to stop them, start the next restart, or exit.
CONTROL_FD = "SHOAL_CONTROL_FD"
PRIORITY_CLASSES = "SHOAL_PRIORITY_CLASSES"  # local priority classes: "high=100,low=-10"
CODE_BUNDLE = "SHOAL_CODE_BUNDLE"  # URI of the content-hashed code bundle (Kubernetes pods)
KUBE_CONFIG = "SHOAL_KUBE_CONFIG"  # the Kubernetes engine's settings, as JSON, for the driver pod
# The runs a driver pod's run resumes (`shoal run --resume`), newest first, comma-separated.
RESUMES = "SHOAL_RESUMES"
PREIMPORT = "SHOAL_PREIMPORT"  # "0": the node launcher does not pre-load torch and fork ranks
# "0": the local engine starts every worker afresh, not forked from its worker template
WORKER_TEMPLATE = "SHOAL_WORKER_TEMPLATE"
# "0": a run's worker template ends with the run; by default the process keeps one idle
# template for its next run (`_engines/local/templates.py`)
KEEP_WORKER_TEMPLATE = "SHOAL_KEEP_WORKER_TEMPLATE"
# Padding in the worker template's environment: room for a forked worker's variables in the
# block /proc/<pid>/environ shows (`_runtime/worker_template._show_as`)
TEMPLATE_ROOM = "SHOAL_TEMPLATE_ROOM"
# "1": the task asked for more GPUs than this machine has, so they are emulated on CPU (no
# CUDA device is visible); torch's NCCL process groups then run on gloo (see frameworks.py).
GPUS_EMULATED = "SHOAL_GPUS_EMULATED"
# What to profile in this task's processes, in `ProfileSpec.to_text` form
# ("ranks=0,3:steps=10-12:tool=torch"); unset: nothing is profiled.
PROFILE = "SHOAL_PROFILE"
# The Nsight Systems session this process was started in (``nsys launch --session-new=``),
# set when a capture profile (``capture=task|manual``) re-executes a worker or a rank under
# it; the process's ``nsys start``/``nsys stop`` name it (`shoal._runtime.observe.nsys_session`).
NSYS_SESSION = "SHOAL_NSYS_SESSION"
# How a hang diagnosis reads the ranks' Python stacks: "py-spy" | "faulthandler" (the
# fallback, forced) | unset: py-spy where it is on PATH, else faulthandler.
HANG_STACKS = "SHOAL_HANG_STACKS"
# A plain task of a ``RayJobConfig(address=)`` environment: JSON {"address", "runtime_env"};
# its worker connects the process to that Ray cluster before the body runs.
RAY_INIT = "SHOAL_RAY_INIT"
# Every node of a Ray gang: a JSON list, by node rank, of what each raylet is started with
# (`shoal._spec.ray.nodes_config`; read by `shoal._runtime.node.ray_node`). The same on every node.
RAY_NODES = "SHOAL_RAY_NODES"
# The address of the node (pod) a gang's process runs on, on every engine: Kubernetes gives
# pods this variable through the downward API, and Flyte code (its Ray examples) reads it.
POD_IP = "MY_POD_IP"
SECRETS_DIR = "SHOAL_SECRETS_DIR"  # the folder a task's mounted secrets (Secret(mount=)) are in
# How far the background writer of asynchronous checkpoint saves stands back from training
# (read in each rank's process, see `shoal._storage.checkpoints.writer`): the nice value added to
# its thread, 0 to 19 ("0": the writer runs like training's threads and hashes in the shared
# pool, as before), and the seconds a save may stay in flight before it is written at full speed.
CHECKPOINT_WRITER_NICE = "SHOAL_CHECKPOINT_WRITER_NICE"
DEFAULT_CHECKPOINT_WRITER_NICE = 13
CHECKPOINT_WRITER_DEADLINE = "SHOAL_CHECKPOINT_WRITER_DEADLINE"
DEFAULT_CHECKPOINT_WRITER_DEADLINE = 60.0

# --- a Slurm allocation (read by `shoal._runtime.node.allocation`, which an sbatch script runs)
# The folder every start of the gang logs under (rank and node logs of restart k go in r<k>/).
GANG_LOG_DIR = "SHOAL_GANG_LOG_DIR"
MAX_RESTARTS = "SHOAL_MAX_RESTARTS"  # whole-group restarts the allocation may make
RESUME_AFTER_PREEMPTION = "SHOAL_RESUME_AFTER_PREEMPTION"  # "1": a requeue uses no restart
# The command the allocation's steps run on every node, shell-quoted (default: this Python's
# ``-m shoal._runtime.node.launcher``); a container runtime's flags go in SRUN_OPTIONS.
NODE_COMMAND = "SHOAL_NODE_COMMAND"
SRUN_OPTIONS = "SHOAL_SRUN_OPTIONS"  # extra srun options of every step, shell-quoted

# --- what torchrun defines for each rank (read by DDP, FSDP, Lightning, Accelerate...) -------
TORCH_RANK = "RANK"
TORCH_LOCAL_RANK = "LOCAL_RANK"
TORCH_WORLD_SIZE = "WORLD_SIZE"
TORCH_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
TORCH_GROUP_RANK = "GROUP_RANK"
TORCH_GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"
TORCH_MASTER_ADDR = "MASTER_ADDR"
TORCH_MASTER_PORT = "MASTER_PORT"
# --- what DeepSpeed's own launcher adds (`deepspeed.launcher.launch`): its CPU accelerator
# counts LOCAL_SIZE devices and shares memory between ranks only when LOCAL_SIZE is the world,
# its NVMe checkpoint writers read CROSS_RANK and CROSS_SIZE (the node and the node count).
DS_LOCAL_SIZE = "LOCAL_SIZE"
DS_CROSS_RANK = "CROSS_RANK"
DS_CROSS_SIZE = "CROSS_SIZE"
# The accelerator DeepSpeed uses ("cpu", "cuda", ...): "cpu" where GPUs are emulated, so it
# says why instead of guessing from what torch sees.
DS_ACCELERATOR = "DS_ACCELERATOR"
# DeepSpeed's default process-group timeout, in whole minutes; set by the user, it wins over
# the gang's collective_timeout (see `shoal._runtime.frameworks`).
DEEPSPEED_TIMEOUT = "DEEPSPEED_TIMEOUT"


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


def machine_dir() -> Path:
    """The lease table's folder: ``$SHOAL_MACHINE_DIR``, else ``/tmp/shoal-<uid>``.

    Not ``$XDG_RUNTIME_DIR`` or ``$TMPDIR``: they differ between a login shell, a cron job and
    a batch job of the same user, and two runs must find the same table."""
    value = os.environ.get(MACHINE_DIR)
    return Path(value).expanduser() if value else default_machine_dir()


def default_machine_dir() -> Path:
    return Path("/tmp") / f"shoal-{os.getuid()}"


def ui_url() -> str:
    """The base URL of `shoal ui`: ``$SHOAL_UI_URL``, else ``http://127.0.0.1:8484``."""
    return (os.environ.get(UI_URL) or f"http://127.0.0.1:{DEFAULT_UI_PORT}").rstrip("/")


def run_url(run: str) -> str:
    """The page of one run in `shoal ui`: the one URL scheme `Run.url` and the UI share."""
    return f"{ui_url()}/runs/{run}"


def priority_classes() -> dict[str, int]:
    """Local priority classes from ``SHOAL_PRIORITY_CLASSES="high=100,low=-10"``."""
    out: dict[str, int] = {}
    for item in os.environ.get(PRIORITY_CLASSES, "").split(","):
        name, sep, value = item.strip().partition("=")
        if sep:
            try:
                out[name.strip()] = int(value)
            except ValueError:
                continue
    return out


def checkpoint_uri(store: str, lineage: str, action: str) -> str:
    """Where the checkpoint of one task call lives: it belongs to the call (the first run of a
    resume chain and the action), not to an attempt, a restart or a resumed run."""
    return f"{store.rstrip('/')}/checkpoints/{lineage}/{action}"


def checkpoint_local_dir(uri: str) -> Path:
    """This machine's working folder for the checkpoint at ``uri`` (see `checkpoint_uri`)."""
    lineage, action = uri.rstrip("/").split("/")[-2:]
    return Path(f"{home()}/checkpoints/{lineage}/{action}")  # one Path: made once per call


def gpus_emulated(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process's GPUs are emulated on CPU (``SHOAL_GPUS_EMULATED=1``)."""
    return (os.environ if environ is None else environ).get(GPUS_EMULATED) == "1"


def system_metrics_interval(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between system-metric samples (``$SHOAL_SYSTEM_METRICS_INTERVAL``, default 2);
    0 turns sampling off. A value that is not a number >= 0 raises ValueError, which the
    driver turns into a SpecError before the run starts."""
    raw = (os.environ if environ is None else environ).get(SYSTEM_METRICS_INTERVAL, "")
    if not raw.strip():
        return DEFAULT_SYSTEM_METRICS_INTERVAL
    value = float(raw)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{raw!r} is not a number of seconds >= 0")
    return value


def checkpoint_writer_nice(environ: Mapping[str, str] | None = None) -> int:
    """The nice value added to the background checkpoint writer (``$SHOAL_CHECKPOINT_WRITER_NICE``,
    default 13). A value that is not an integer from 0 to 19 raises ValueError."""
    raw = (os.environ if environ is None else environ).get(CHECKPOINT_WRITER_NICE, "")
    if not raw.strip():
        return DEFAULT_CHECKPOINT_WRITER_NICE
    value = int(raw)
    if not 0 <= value <= 19:
        raise ValueError(f"{raw!r} is not an integer from 0 to 19")
    return value


def checkpoint_writer_deadline(environ: Mapping[str, str] | None = None) -> float:
    """Seconds an asynchronous save may yield to training before it is written at full speed
    (``$SHOAL_CHECKPOINT_WRITER_DEADLINE``, default 60). A value that is not a number > 0
    raises ValueError."""
    raw = (os.environ if environ is None else environ).get(CHECKPOINT_WRITER_DEADLINE, "")
    if not raw.strip():
        return DEFAULT_CHECKPOINT_WRITER_DEADLINE
    value = float(raw)
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{raw!r} is not a number of seconds > 0")
    return value


def ranged_get_min(environ: Mapping[str, str] | None = None) -> int | None:
    """The size in bytes from which an object-store download is ranged GETs
    (``$SHOAL_RANGED_GET_MIN_MIB``, default 16 MiB), None for "off". A value that is neither
    "off" nor an integer >= 1 raises ValueError."""
    raw = (os.environ if environ is None else environ).get(RANGED_GET_MIN_MIB, "").strip()
    if not raw:
        return DEFAULT_RANGED_GET_MIN_MIB * 1024 * 1024
    if raw.lower() == "off":
        return None
    value = int(raw)
    if value < 1:
        raise ValueError(f"{raw!r} is below 1")
    return value * 1024 * 1024


def debug(environ: Mapping[str, str] | None = None) -> bool:
    """Whether tracebacks show Shoal's own frames too (`shoal --debug` sets it)."""
    return (os.environ if environ is None else environ).get(DEBUG, "") == "1"


def containers(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the local engine runs tasks inside their images (``SHOAL_CONTAINERS=1``)."""
    return (os.environ if environ is None else environ).get(CONTAINERS, "") == "1"


def worker_template(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the local engine forks its workers from a template process
    (``SHOAL_WORKER_TEMPLATE``, default on; "0" turns it off)."""
    return (os.environ if environ is None else environ).get(WORKER_TEMPLATE, "") != "0"


def keep_worker_template(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a run's idle worker template is kept for the process's next run
    (``SHOAL_KEEP_WORKER_TEMPLATE``, default on; "0" turns it off)."""
    return (os.environ if environ is None else environ).get(KEEP_WORKER_TEMPLATE, "") != "0"


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


@dataclass(frozen=True)
class NodeEnv:
    """What the node launcher of one node of a gang is told (local process or Kubernetes pod).

    Everything a node needs is here; the launcher reads nothing else, so the same launcher runs
    under both engines.
    """

    home: str
    store: str
    run: str
    action: str
    attempt: int
    env_name: str
    code_file: str
    task: str
    io: str
    node_rank: int
    nnodes: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    restart_attempt: int
    runtime: str = "torch"
    rdzv_backend: str = "static"
    torch_max_restarts: int = 0
    launch: str = "direct"
    rank_log_dir: str = ""
    collective_timeout: float = 300.0
    grace_period: float = 30.0
    master_wait: float = 300.0
    node_addr: str = ""
    checkpoint_uri: str = ""
    profile: str = ""  # `ProfileSpec.to_text()`; "": no rank of the gang is profiled
    start_cause: str = "first_start"  # a key of `shoal._spec.call.START_CAUSES`
    min_nnodes: int = 0  # an elastic gang's fewest nodes; 0: fixed (``nnodes``)
    max_nnodes: int = 0  # an elastic gang's most nodes; 0: fixed (``nnodes``)

    _NAMES: ClassVar[dict[str, str]] = {
        "home": HOME, "store": STORE, "run": RUN, "action": ACTION, "attempt": ATTEMPT,
        "env_name": ENV_NAME, "code_file": CODE_FILE, "task": TASK, "io": IO,
        "node_rank": NODE_RANK, "nnodes": NNODES, "nproc_per_node": NPROC_PER_NODE,
        "master_addr": MASTER_ADDR, "master_port": MASTER_PORT,
        "restart_attempt": RESTART_ATTEMPT, "runtime": RUNTIME, "rdzv_backend": RDZV_BACKEND,
        "torch_max_restarts": TORCH_MAX_RESTARTS, "launch": LAUNCH,
        "rank_log_dir": RANK_LOG_DIR, "collective_timeout": COLLECTIVE_TIMEOUT,
        "grace_period": GRACE_PERIOD, "master_wait": MASTER_WAIT, "node_addr": NODE_ADDR,
        "checkpoint_uri": CHECKPOINT_URI, "profile": PROFILE, "start_cause": START_CAUSE,
        "min_nnodes": MIN_NNODES, "max_nnodes": MAX_NNODES,
    }

    _OMITTED_AT_DEFAULT: ClassVar[frozenset[str]] = frozenset(
        {"profile", "start_cause", "min_nnodes", "max_nnodes"})

    def to_env(self) -> dict[str, str]:
        # An unprofiled gang's pods and nodes carry no SHOAL_PROFILE at all, and a fixed gang's
        # first start none of the elastic ones.
        return {self._NAMES[f.name]: str(getattr(self, f.name)) for f in fields(self)
                if f.name not in self._OMITTED_AT_DEFAULT or getattr(self, f.name) != f.default}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> NodeEnv:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        missing = []
        for f in fields(cls):
            name = cls._NAMES[f.name]
            if name not in env:
                if f.default is MISSING:
                    missing.append(name)
                continue
            raw = env[name]
            kind = type(f.default) if f.default is not MISSING else None
            if f.type in ("int", int) or kind is int:
                values[f.name] = int(raw)
            elif f.type in ("float", float) or kind is float:
                values[f.name] = float(raw)
            else:
                values[f.name] = raw
        if missing:
            raise RuntimeError("this node was not started by a Shoal engine: "
                               f"{', '.join(missing)} not set")
        return cls(**values)  # type: ignore[arg-type]


def torch_rank_env(node: NodeEnv, local_rank: int) -> dict[str, str]:
    """What torchrun gives a worker process (static rendezvous), for one local rank, the
    gang's restart count as JobSet names it (``JOBSET_RESTART_ATTEMPT``, read by Flyte 2 code)
    and what DeepSpeed's launcher adds (LOCAL_SIZE, CROSS_RANK, CROSS_SIZE)."""
    rank = node.node_rank * node.nproc_per_node + local_rank
    world = node.nnodes * node.nproc_per_node
    return {
        TORCH_RANK: str(rank),
        TORCH_LOCAL_RANK: str(local_rank),
        TORCH_WORLD_SIZE: str(world),
        TORCH_LOCAL_WORLD_SIZE: str(node.nproc_per_node),
        TORCH_GROUP_RANK: str(node.node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "ROLE_NAME": "default",
        TORCH_GROUP_WORLD_SIZE: str(node.nnodes),
        TORCH_MASTER_ADDR: node.master_addr,
        TORCH_MASTER_PORT: str(node.master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": str(node.torch_max_restarts),
        "TORCHELASTIC_RUN_ID": rendezvous_id(node),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        JOBSET_RESTART_ATTEMPT: str(node.restart_attempt),
        DS_LOCAL_SIZE: str(node.nproc_per_node),
        DS_CROSS_RANK: str(node.node_rank),
        DS_CROSS_SIZE: str(node.nnodes),
    }


def deepspeed_rank_env(environ: Mapping[str, str]) -> dict[str, str]:
    """DeepSpeed's launcher's names for a rank that torchrun started (from torchrun's own, so a
    c10d rendezvous's group rank is the node's): what `torch_rank_env` gives a rank Shoal
    starts itself. Names already set are left as they are."""
    pairs = ((DS_LOCAL_SIZE, TORCH_LOCAL_WORLD_SIZE), (DS_CROSS_RANK, TORCH_GROUP_RANK),
             (DS_CROSS_SIZE, TORCH_GROUP_WORLD_SIZE))
    return {ours: environ[theirs] for ours, theirs in pairs
            if ours not in environ and theirs in environ}


def rendezvous_id(node: NodeEnv) -> str:
    """Unique per whole-group restart, so a restarted gang never meets the dead one's store."""
    return f"{node.run}-{node.action}-{node.attempt}-{node.restart_attempt}"
