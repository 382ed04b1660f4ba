"""A clustered run's records, metrics and logs as real ranks and the driver leave them, written
without running it: the input of `scale_records.py` (8,192 ranks of 10,000 steps cannot run on
a laptop; their files can be written on one).

What a finished, fixed-size gang of ``nodes`` x ``per_node`` ranks leaves in ``SHOAL_HOME``:
- the records (SQLite, through the public `Records`): one run, one action, one attempt, and
  the engine's ``gang_admitted`` / ``gang_started`` events with the topology the local engine
  puts in them;
- per rank, ``metrics/a0.0/r0.rank<N>.jsonl``: ``metrics`` user metrics every step, one line
  per flush of the writer (a flush every `FLUSH_INTERVAL` s, a step every ``step_time`` s);
  ``r0.rank<N>.system.jsonl``: the node's samples of the rank (CPU %, PSS, RSS) every
  ``system_interval`` s;
- per rank, ``logs/gang/a0.0/r0/rank<N>.log`` (a line every ``log_every`` steps, rank 0 every
  tenth of that), ``rank<N>.status.json`` and an empty ``rank<N>.faulthandler.txt``; per node,
  ``node<i>.log``.

The bytes of a metrics file come from Shoal's own `MetricsWriter`, fed each step's points and
flushed at each flush boundary, as in a rank: it writes one body per `VARIANTS` (the values
differ by variant), and each rank's file is its identity line (`open_writer`'s, as a rank
writes it) followed by its variant's body, copied. Only the values repeat across ranks;
tests/unit/test_scale_generator.py checks that Shoal's readers see the files as they see a
real gang's.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shoal._runtime.observe.metrics import FLUSH_INTERVAL, MetricsWriter, metrics_path, open_writer
from shoal._runtime.observe.system_metrics import CPU, PSS, RSS
from shoal._storage.records import Records

VARIANTS = 8
USER_METRICS = ("loss", "lr", "grad_norm", "tokens_per_s")
ACTION = "a0"
TASK = "scale.train"


@dataclass(frozen=True)
class Shape:
    """The run to write: ``nodes`` x ``per_node`` ranks, ``steps`` steps of ``step_time`` s."""

    nodes: int
    per_node: int = 8
    steps: int = 10_000
    metrics: int = 4
    step_time: float = 1.0
    system_interval: float = 2.0
    log_every: int = 100

    @property
    def ranks(self) -> int:
        return self.nodes * self.per_node

    @property
    def names(self) -> tuple[str, ...]:
        extra = tuple(f"metric_{i}" for i in range(len(USER_METRICS), self.metrics))
        return (USER_METRICS + extra)[:self.metrics]


def _value(name: str, step: int, variant: int) -> float:
    if name == "loss":
        return 2.0 * math.exp(-step / 3000) + 0.5 + 0.01 * variant + 0.02 * math.sin(step)
    if name == "lr":
        return 3e-4 * min(1.0, (step + 1) / 500)
    if name == "grad_norm":
        return 1.0 + 0.3 * math.cos(step / 7 + variant)
    return 1.2e5 + 1e3 * variant + 50.0 * math.sin(step / 3)


def _user_points(shape: Shape, variant: int,
                 start: float) -> Iterator[tuple[int, float, list[tuple[str, float]]]]:
    for step in range(shape.steps):
        yield step, start + step * shape.step_time, [(n, _value(n, step, variant))
                                                     for n in shape.names]


def _system_points(shape: Shape, variant: int,
                   start: float) -> Iterator[tuple[int, float, list[tuple[str, float]]]]:
    samples = int(shape.steps * shape.step_time / shape.system_interval)
    for i in range(samples):
        rss = 2.0e9 + 1e6 * variant + 4096.0 * i
        yield i, start + (i + 1) * shape.system_interval, [
            (CPU, 95.0 + (i * 7 + variant) % 10), (PSS, rss * 0.6), (RSS, rss)]


def _body(points: Iterator[tuple[int, float, list[tuple[str, float]]]], start: float) -> bytes:
    """What a `MetricsWriter` appends after its identity line for these points, flushing
    every `FLUSH_INTERVAL` s of their time as its thread does."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "body.jsonl"
        writer = MetricsWriter(path, {})
        flush_at = start + FLUSH_INTERVAL
        for step, at, batch in points:
            while at >= flush_at:
                writer.flush()
                flush_at += FLUSH_INTERVAL
            writer.add(batch, step, at)
        writer.close()
        return path.read_bytes().split(b"\n", 1)[1] if path.exists() else b""


def _identity(home: Path, run: str, rank: int, node: int, source: str,
              started: float) -> bytes:
    writer = open_writer(home, run, ACTION, 0, restart=0, node=node, rank=rank, source=source)
    writer.identity.update(pid=1 if source == "system" else 100 + rank % 8, started=started)
    return (json.dumps(writer.identity, separators=(",", ":")) + "\n").encode()


def _rank_log(shape: Shape, rank: int, start: float) -> str:
    every = max(1, shape.log_every // 10) if rank == 0 else shape.log_every
    lines = [f"rank {rank}: world {shape.ranks}, {shape.per_node} per node, "
             f"node {rank // shape.per_node}",
             f"rank {rank}: model ready, 1.2B parameters, data shard {rank}"]
    lines += [f"rank {rank} step {s} loss {_value('loss', s, rank % VARIANTS):.4f} "
              f"lr {_value('lr', s, 0):.2e} at {start + s * shape.step_time:.1f}"
              for s in range(0, shape.steps, every)]
    lines.append(f"rank {rank}: done after {shape.steps} steps")
    return "\n".join(lines) + "\n"


def generate(home: Path, shape: Shape, *, run: str | None = None) -> str:
    """Write the run into ``home`` (a fresh SHOAL_HOME); its name."""
    records = Records(home / "shoal.db")
    rec = records.create_run(name=run, task=TASK, code_file="scale.py", engine="local",
                             store=(home / "store").as_uri(), inputs={"steps": shape.steps})
    run = rec.name
    records.set_run_state(run, "running")
    records.create_action(run=run, action_id=ACTION, task=TASK, env="scale",
                          inputs={"steps": shape.steps})
    records.set_action_state(run, ACTION, "running")
    logs = home / "runs" / run / "logs"
    records.start_attempt(run, ACTION, 0, pid=None, log_path=logs / f"{ACTION}.0.log")
    topology = {"nnodes": shape.nodes, "nproc_per_node": shape.per_node,
                "world_size": shape.ranks, "min_nnodes": shape.nodes,
                "max_nnodes": shape.nodes, "restart": 0, "task": TASK, "cause": "first_start",
                "master_port": 29500, "pids": [], "same_launchers": False}
    records.add_event(run, "gang_admitted", f"{TASK}: gang admitted (restart 0)",
                      action_id=ACTION, data={"restart": 0, "task": TASK})
    records.add_event(run, "gang_started",
                      f"{TASK}: gang started (restart 0, {shape.nodes} node(s) × "
                      f"{shape.per_node} = {shape.ranks} ranks, master port 29500)",
                      action_id=ACTION, data=topology)
    start = time.time() - shape.steps * shape.step_time
    write_files(home, run, shape, start)
    records.finish_attempt(run, ACTION, 0, state="succeeded")
    records.set_action_state(run, ACTION, "succeeded", outputs=0.5)
    records.set_run_state(run, "succeeded", outputs=0.5)
    return run


def write_files(home: Path, run: str, shape: Shape, start: float) -> None:
    """Every rank's metrics, system metrics and logs, and every node's log."""
    user = [_body(_user_points(shape, v, start), start) for v in range(VARIANTS)]
    system = [_body(_system_points(shape, v, start), start) for v in range(VARIANTS)]
    gang = home / "runs" / run / "logs" / "gang" / f"{ACTION}.0" / "r0"
    gang.mkdir(parents=True)
    metrics_path(home, run, ACTION, 0, 0, 0).parent.mkdir(parents=True)
    end = start + shape.steps * shape.step_time
    for rank in range(shape.ranks):
        node = rank // shape.per_node
        for source, bodies in (("user", user), ("system", system)):
            path = metrics_path(home, run, ACTION, 0, 0, rank, source=source)
            with path.open("wb") as f:
                f.write(_identity(home, run, rank, node, source, start))
                f.write(bodies[rank % VARIANTS])
        (gang / f"rank{rank}.log").write_text(_rank_log(shape, rank, start))
        (gang / f"rank{rank}.faulthandler.txt").write_text("")
        (gang / f"rank{rank}.status.json").write_text(json.dumps(
            {"rank": rank, "pid": 100 + rank % 8, "step": shape.steps - 1, "step_at": end,
             "updated": end, "collective": None, "collective_since": None,
             "failed_collective": None}))
    for node in range(shape.nodes):
        (gang / f"node{node}.log").write_text(
            f"node {node}: torchrun --nnodes={shape.nodes} --nproc-per-node={shape.per_node} "
            f"--node-rank={node}\nnode {node}: all {shape.per_node} ranks exited 0\n")
