"""The sbatch script of one attempt of a task call: ``#SBATCH`` lines from the environment's
`Resources` and the settings, the node contract as exports, then the allocation program.

A clustered call is one allocation of ``replicas`` nodes, one task per node; a plain call is an
allocation of one node. Both run `shoal._runtime.node.allocation`, which starts the node launchers
with srun (and restarts them as new steps). Pure: values in, text out; the same text is what
``--dry-run`` prints and what sbatch reads.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shoal import _contract as contract
from shoal._contract import NodeEnv
from shoal._engines.slurm.config import Placement, SlurmSettings, check_options
from shoal._spec.call import ClusterSpec, EnvSpec
from shoal._spec.names import check_path_segment, shown
from shoal._spec.ray import nodes_config
from shoal._spec.secret_names import is_secret
from shoal.errors import SpecError

JOB_PREFIX = "shoal"


@dataclass(frozen=True)
class JobPlan:
    """What one attempt's job is: its script and the variables that are not in it."""

    script: str
    name: str
    nodes: int


def job_name(run: str, action: str, attempt: int) -> str:
    return f"{JOB_PREFIX}-{run}-{action}-{attempt}"


def run_prefix(run: str) -> str:
    """What the names of every job of ``run`` start with."""
    return f"{JOB_PREFIX}-{run}-"


def directive(option: str, value: str | None = None) -> str:
    """One ``#SBATCH`` line. sbatch reads directives up to the first line that is not a
    comment: a value holding a newline would end them there (the lines after it silently
    dropped) and run the rest as shell, so such a value is refused, and the rest quoted as
    sbatch reads quotes."""
    text = option if value is None else f"{option}={value}"
    if not text.isprintable():
        raise SpecError(f"#SBATCH {option}", text, "a directive must be one line of printable "
                        "characters (no newline, tab, NUL or escape)",
                        "remove the control characters from the name or setting")
    return f"#SBATCH {text}" if value is None else f"#SBATCH {option}={shlex.quote(value)}"


def slurm_minutes(seconds: float) -> str:
    """A task timeout as sbatch's --time (whole minutes, rounded up, a minute of slack)."""
    return str(max(1, math.ceil(seconds / 60) + 1))


def resource_options(env: EnvSpec, gpu_types: Mapping[str, str] | None = None) -> list[str]:
    """What one node of ``env`` asks Slurm for: CPUs as requested (Slurm gives them whole),
    memory at its limit (what the node may use before it is killed), GPUs by count (and type,
    where ``gpu_types`` names the accelerator's). Not ``disk``: many clusters declare no
    TmpDisk, and sbatch then refuses any --tmp (add it to sbatch_options where yours does).

    A Ray cluster's groups may each have their own resources (a group's None: the
    environment's); a Slurm job asks the same of every node, so each node asks for the most
    any group needs: CPUs, memory and GPUs, each the largest (a heterogeneous job would fit
    each group exactly, but then every srun step, requeue and node list of the allocation
    program would be one per component)."""
    c = env.cluster
    asks = [_node_ask(env.resources)] if c is None or c.ray is None else [
        _node_ask(g.resources if g.resources is not None else env.resources)
        for g in c.ray.groups]
    cpu = max(a[0] for a in asks)
    memory = max(a[1] for a in asks)
    gpus, accelerator = max(((a[2], a[3]) for a in asks), key=lambda g: g[0])
    options = [f"--cpus-per-task={cpu}"]
    if memory:
        options.append(f"--mem={memory}M")
    if gpus:
        kind = (gpu_types or {}).get(accelerator or "")
        options.append(f"--gpus-per-node={f'{kind}:' if kind else ''}{gpus}")
    return options


def _node_ask(r: Any) -> tuple[int, int, int, str | None]:
    """(whole CPUs, memory in MiB (0: Slurm's default), GPUs, accelerator) of one node of
    `Resources` ``r`` (None: one CPU, nothing else)."""
    if r is None:
        return 1, 0, 0, None
    cpu = r.cpu_request if r.cpu_request is not None else 1
    memory = r.memory_limit_bytes or r.memory_request_bytes
    return (max(1, math.ceil(cpu)), max(1, math.ceil(memory / 2**20)) if memory else 0,
            int(r.gpu_count), r.accelerator if r.gpu_count else None)


def pyxis_image(ref: str) -> str:
    """A Docker image reference as pyxis (enroot) reads it: a registry host is followed by '#'
    (``nvcr.io#nvidia/pytorch:24.01``; ``nvcr.io/nvidia/...`` would be looked for on Docker
    Hub). Docker Hub names and image files (``/shared/train.sqsh``) stay as written."""
    if "#" in ref or "/" not in ref or ref.startswith(("/", ".")):
        return ref
    host, path = ref.split("/", 1)
    return f"{host}#{path}" if "." in host or ":" in host or host == "localhost" else ref


def image_options(env: EnvSpec, settings: SlurmSettings, registry: str | None) -> list[str]:
    """srun options that run each node in the environment's image (pyxis), if configured."""
    if settings.container_runtime is None or env.image is None:
        return []
    image = env.image if isinstance(env.image, str) else env.image.uri(registry)
    return [f"--container-image={pyxis_image(image)}", *settings.container_options]


def bash_word(value: str) -> str:
    """``value`` as one bash word on one line: shlex's quoting, or, where the value holds a
    line break or another control character, bash's ``$'...'`` with the character escaped, so
    that a value cannot start a line of the script (a forged ``#SBATCH`` directive, a command)."""
    if not any(ord(c) < 32 or ord(c) == 127 for c in value):
        return shlex.quote(value)
    body = "".join(c if 32 <= ord(c) != 127 and c not in "\\'" else
                   f"\\{c}" if c in "\\'" else f"\\x{ord(c):02x}" for c in value)
    return f"$'{body}'"


def secret_env_vars(env: EnvSpec) -> dict[str, str]:
    """The environment's variables that look like secrets (by name or by value), which its
    script leaves out."""
    return {k: v for k, v in env.env_vars.items() if is_secret(k, v)}


def _placement_lines(placement: Placement) -> list[str]:
    return [directive(option, value) for option, value in (
        ("--partition", placement.partition), ("--account", placement.account),
        ("--qos", placement.qos), ("--time", placement.time_limit)) if value]


def render(*, env: EnvSpec, task: str, node: NodeEnv, placement: Placement,
           settings: SlurmSettings, gang_log_dir: str, extra_env: Mapping[str, str],
           registry: str | None = None) -> JobPlan:
    """The script of one attempt. ``node`` holds the contract values every node shares (its
    node rank, master and restart are set per start by the allocation program)."""
    # Folders on the shared filesystem and the job's name are made of these, whatever door
    # they came through: one that would climb out of the run's folder stops here.
    check_path_segment("run", node.run)
    check_path_segment("action", node.action)
    c = env.cluster or ClusterSpec(replicas=1, nproc_per_node=1, runtime="torch")
    clustered = env.cluster is not None
    check_options("Slurm settings: sbatch_options", placement.sbatch_options)
    name = job_name(node.run, node.action, node.attempt)
    lines = ["#!/bin/bash",
             f"# Shoal: run {shown(node.run)}, action {shown(node.action)} (task {shown(task)}), "
             f"attempt {node.attempt}: {c.replicas} node(s) x {c.nproc_per_node} process(es)",
             directive("--job-name", name),
             ]
    if c.elastic:
        # As many nodes as fit now, MIN to MAX: MAX tasks spread over as many nodes as are
        # free (with one task a node Slurm gives a range's minimum, and with
        # --ntasks-per-node=1 it waits for MAX). Started on fewer, the tasks left over are
        # CPUs held on those nodes; the srun steps run one launcher a node. A node that
        # fails leaves the allocation instead of ending it (--no-kill), and the next step
        # runs on the nodes left (`shoal._runtime.node.allocation`).
        lines += [f"#SBATCH --nodes={c.min_nodes}-{c.replicas}",
                  f"#SBATCH --ntasks={c.replicas}", "#SBATCH --spread-job",
                  "#SBATCH --no-kill"]
    else:
        lines += [f"#SBATCH --nodes={c.replicas}", "#SBATCH --ntasks-per-node=1"]
    lines += [f"#SBATCH {o}" for o in resource_options(env, settings.gpu_types)]
    lines += _placement_lines(placement)
    # sbatch refuses a directive with a bare space in it ("Invalid directive"); it reads quotes.
    lines.append(directive("--output", f"{gang_log_dir}/batch.log"))
    lines.append("#SBATCH --open-mode=append")  # a requeued job adds to the same log
    if clustered:
        # A preempted or requeued gang comes back in a new allocation and resumes.
        lines.append("#SBATCH --requeue")
        lines.append(f"#SBATCH --signal=B:TERM@{max(1, math.ceil(c.grace_period))}")
    else:
        lines.append("#SBATCH --no-requeue")  # a lost plain call is retried as a new attempt
    lines += [directive(o) for o in placement.sbatch_options]
    values = node.to_env()
    for per_start in (contract.NODE_RANK, contract.MASTER_ADDR, contract.MASTER_PORT,
                      contract.RESTART_ATTEMPT, contract.RANK_LOG_DIR):
        values.pop(per_start, None)
    values[contract.GANG_LOG_DIR] = gang_log_dir
    values[contract.MAX_RESTARTS] = str(c.max_restarts if clustered else 0)
    values[contract.RESUME_AFTER_PREEMPTION] = "1" if clustered and \
        c.resume_after_preemption else "0"
    values[contract.NODE_COMMAND] = shlex.join([settings.python, "-m",
                                                "shoal._runtime.node.launcher"])
    srun = image_options(env, settings, registry)
    if srun:
        values[contract.SRUN_OPTIONS] = shlex.join(srun)
    if c.ray is not None:
        # Every node's raylet settings, by node rank: the same value on every node (its
        # launcher picks its own entry); the allocation program runs the head and the
        # workers as two steps (`shoal._runtime.node.allocation`).
        values[contract.RAY_NODES] = nodes_config(c.ray, env.resources)
    if not clustered:
        values[contract.PREIMPORT] = "0"  # one process: nothing to fork, no torch to pre-load
    lines.append("")
    lines.append("# The environment's variables and Shoal's node contract (docs/architecture.md)")
    secret = secret_env_vars(env)
    for key, value in {**dict(env.env_vars), **dict(extra_env), **values}.items():
        if key in secret:
            # Slurm keeps the script (scontrol write batch_script): the value comes with
            # sbatch's own environment instead, as a secret's does (`secret_env_vars`).
            lines.append(f"# {key}: from the environment sbatch was started with")
            continue
        lines.append(f"export {key}={bash_word(value)}")
    lines.append("")
    lines.append("# Starts the node launchers as srun steps; a failed step is restarted as a "
                 "new step here")
    lines.append(f"exec {shlex.quote(settings.python)} -m shoal._runtime.node.allocation")
    return JobPlan(script="\n".join(lines) + "\n", name=name, nodes=c.replicas)


def render_driver(*, run: str, env: EnvSpec, placement: Placement, settings: SlurmSettings,
                  log: str, exports: Mapping[str, str], argv: list[str]) -> str:
    """The script of a detached driver (``shoal run --detach``): one task on one node that
    runs ``shoal run ARGV`` there, as it would have run here."""
    check_path_segment("run", run)
    own = resource_options(env, settings.gpu_types)
    lines = ["#!/bin/bash", f"# Shoal: the driver of run {shown(run)} (shoal run --detach)",
             directive("--job-name", f"{run_prefix(run)}driver"), "#SBATCH --nodes=1",
             "#SBATCH --ntasks=1", *(f"#SBATCH {o}" for o in own)]
    lines += _placement_lines(placement)
    lines += [directive("--output", log), "#SBATCH --no-requeue",
              *(directive(o) for o in placement.sbatch_options), ""]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in exports.items()]
    lines.append(f"exec {shlex.join([settings.python, '-m', 'shoal.cli.main', 'run', *argv])}")
    return "\n".join(lines) + "\n"
