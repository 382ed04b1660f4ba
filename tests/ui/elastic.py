"""The records an elastic gang leaves, written by hand: 2 nodes × 2 ranks (1..2 nodes), node 1
lost (2 → 1), then node 1 back (1 → 2), and the run succeeded. The UI tests read them as they
would a real run's; the local engine that writes them is tested by itself."""

from __future__ import annotations

from pathlib import Path

from shoal._storage.records import Records, RunRecord

BOUNDS = {"nproc_per_node": 2, "min_nnodes": 1, "max_nnodes": 2}
# (restart, nodes, cause, resize: (from, to, cause, reason) or None)
HISTORY = [(0, 2, "first_start", None),
           (1, 1, "node_lost", (2, 1, "node_lost", "node 1 lost (its launcher exited, -9)")),
           (2, 2, "grown", (1, 2, "grown", "node 1 is back"))]


def elastic_run(records: Records, home: Path) -> RunRecord:
    run = records.create_run(task="e.main", code_file="e.py", engine="local",
                             store=(home / "store").as_uri(), inputs={})
    records.set_run_state(run.name, "running")
    records.create_action(run=run.name, action_id="a0", task="e.train", env="e", inputs={})
    logs = home / "runs" / run.name / "logs"
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=str(logs / "a0.0.log"))
    for restart, nnodes, cause, resize in HISTORY:
        folder = logs / "gang" / "a0.0" / f"r{restart}"
        folder.mkdir(parents=True)
        for n in range(nnodes):
            (folder / f"node{n}.log").write_text(f"launcher {n}\n")
        for r in range(nnodes * 2):
            (folder / f"rank{r}.log").write_text(f"rank {r} of {nnodes * 2}\n")
        if resize is not None:
            was, now, why, reason = resize
            records.add_event(run.name, "gang_resized",
                              f"gang resized {was} -> {now} nodes: {reason}", action_id="a0",
                              data={"task": "e.train", "restart": restart, "from": was,
                                    "to": now, "cause": why, "nodes": [1], "reason": reason,
                                    "uses_restart": False, "left": 3})
        records.add_event(run.name, "gang_started", f"e.train: gang started ({cause})",
                          action_id="a0",
                          data={"task": "e.train", "restart": restart, "logs": {}, "pids": [],
                                "nnodes": nnodes, "world_size": nnodes * 2, "cause": cause,
                                **BOUNDS})
    records.finish_attempt(run.name, "a0", 0, state="succeeded", exit_code=0)
    records.set_action_state(run.name, "a0", "succeeded")
    records.set_run_state(run.name, "succeeded")
    return records.get_run(run.name)
