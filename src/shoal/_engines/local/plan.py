"""Compile a task call into a local process plan: pure, printable (``--dry-run``), testable.

The engine spawns exactly what this module returns, so what ``--dry-run`` prints is what runs.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from shoal import _contract as contract
from shoal._contract import WorkerEnv
from shoal._engines.local.pool import Request
from shoal._runtime.packages import unmet
from shoal._spec import names
from shoal._spec.call import EnvSpec
from shoal._spec.secret_names import redacted
from shoal.errors import SpecError

WORKER_ARGV = (sys.executable, "-m", "shoal._runtime.worker")
DEFAULT_REQUEST = Request(cpu=1.0, memory=0, gpu=0)


def request_for(env: EnvSpec) -> Request:
    """What one process of ``env`` asks the pool for (requests, not limits)."""
    r = env.resources
    if r is None:
        return DEFAULT_REQUEST
    cpu = r.cpu_request if r.cpu_request is not None else DEFAULT_REQUEST.cpu
    memory = r.memory_request_bytes or 0
    return Request(cpu=float(cpu), memory=int(memory), gpu=int(r.gpu_count or 0))


def priority_for(env: EnvSpec, priorities: Mapping[str, int]) -> tuple[str, int]:
    """(queue, priority) from the Kueue labels of the environment's pod template."""
    pt = env.pod_template
    queue = (pt.queue_name if pt is not None else None) or "default"
    klass = pt.priority_class if pt is not None else None
    if klass is None:
        return queue, 0
    if klass not in priorities:
        known = ", ".join(f"{k}={v}" for k, v in sorted(priorities.items())) or "none"
        raise SpecError(f"TaskEnvironment({env.name!r}).pod_template priority-class label",
                        klass, f"is not a local priority class (known: {known})",
                        f"define it for the local engine: {contract.PRIORITY_CLASSES}="
                        f"{klass}=100 (Kueue's WorkloadPriorityClass value)")
    return queue, priorities[klass]


def worker_environ(env: EnvSpec, wenv: WorkerEnv | None, base: Mapping[str, str],
                   gpus_emulated: bool = False) -> dict[str, str]:
    """The full environment of a process of ``env`` (a worker, or a gang's node launcher)."""
    # Secrets are added when a process starts (`secrets.secret_environ`): a plan is printed.
    out = dict(base)
    out.update(env.env_vars)
    if wenv is not None:
        out.update(wenv.to_env())
    out["PYTHONUNBUFFERED"] = "1"
    if env.profile is not None:
        out[contract.PROFILE] = env.profile.to_text()
    if gpus_emulated:
        out["CUDA_VISIBLE_DEVICES"] = ""
        out[contract.GPUS_EMULATED] = "1"
        out[contract.DS_ACCELERATOR] = "cpu"  # DeepSpeed's CPU path (gloo), said, not guessed
    return out


def worker_key(env: EnvSpec, capacity: Request) -> str:
    """Which warm workers may run a call of ``env``: those whose process environment is the
    one this call's spec asks for. ``task.override(env_vars=...)`` gives a call of the same
    environment other variables, and a worker cannot change the variables it started with."""
    emulated = request_for(env).gpu > capacity.gpu
    facts = repr((sorted(env.env_vars.items()), sorted(map(repr, env.secrets)), emulated)
                 + ((env.profile.to_text(),) if env.profile is not None else ()))
    return f"{env.name}#{hashlib.sha1(facts.encode()).hexdigest()[:12]}"


def format_bytes(n: int) -> str:
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return str(n)


@dataclass(frozen=True)
class ProcessPlan:
    env: str
    argv: tuple[str, ...]
    environ: Mapping[str, str]
    request: Request
    clamped: tuple[str, ...] = ()
    queue: str = "default"
    priority: int = 0
    notes: tuple[str, ...] = field(default=())

    def render(self, *, base: Mapping[str, str] | None = None) -> str:
        base = os.environ if base is None else base
        shown = {k: v for k, v in self.environ.items() if base.get(k) != v}
        lines = [
            f"environment {self.env!r}: one warm worker process per concurrent call",
            f"  command:  {' '.join(self.argv)}",
            f"  request:  cpu={self.request.cpu:g} memory={format_bytes(self.request.memory)} "
            f"gpu={self.request.gpu}  (queue {self.queue!r}, priority {self.priority})",
        ]
        lines += [f"  clamped:  {c}" for c in self.clamped]
        lines.append("  env:")
        lines += [f"    {k}={v}" for k, v in sorted(redacted(shown).items())]
        lines += [f"  note:     {n}" for n in self.notes]
        # One value, one line: a newline in a value is shown escaped, so it cannot forge one.
        return "\n".join(names.shown(line) for line in lines)


def plan_process(env: EnvSpec, *, capacity: Request, wenv: WorkerEnv,
                 base: Mapping[str, str], priorities: Mapping[str, int]) -> ProcessPlan:
    want = request_for(env)
    from shoal._engines.local.pool import ResourcePool

    got, clamped = ResourcePool(capacity).clamp(want)
    queue, priority = priority_for(env, priorities)
    notes = []
    missing = unmet(env.image_packages)
    if missing:
        # Locally a task runs in this interpreter, not in its image: say what it lacks.
        notes.append("its image declares packages this interpreter lacks: " + ", ".join(missing)
                     + " (pip install them, or the tasks may fail to import)")
    return ProcessPlan(
        env=env.name,
        argv=WORKER_ARGV,
        environ=worker_environ(env, wenv, base, gpus_emulated=want.gpu > capacity.gpu),
        request=got,
        clamped=tuple(clamped),
        queue=queue,
        priority=priority,
        notes=tuple(notes),
    )
