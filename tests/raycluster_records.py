"""The records a Ray call leaves, written by hand: a head and one worker node, the head's
``ray_cluster`` event, node logs and (the nodes stopped) Ray's session logs copied beside them.
The unit and browser tests render these as they would a real run's; the real run that writes
them is tested in tests/raycluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shoal._storage.records import Records, RunRecord

DASHBOARD = "http://127.0.0.2:8265"
NODES = [{"node": 0, "group": "head", "address": "127.0.0.2"},
         {"node": 1, "group": "workers", "address": "127.0.0.3"}]
# node -> file -> text, as RayNode.finish copies them (the head also runs the GCS)
RAY_LOGS = {
    0: {"raylet.out": "head raylet up\n", "gcs_server.out": "gcs listening\n",
        "dashboard.log": "dashboard on 8265\n"},
    1: {"raylet.out": "worker raylet up\n", "raylet.err": "worker raylet warned\n",
        "python-core-worker-01.log": "a core worker\n"},
}


def ray_run(records: Records, home: Path, *, state: str = "succeeded",
            dashboard_url: str = DASHBOARD, name: str | None = None,
            extra: dict[str, Any] | None = None) -> RunRecord:
    """A run whose root ``a0`` is a Ray call on 2 nodes; ``state`` "running": still up (no
    session logs yet), else ended in that state with them."""
    run = records.create_run(name=name, task="r.main", code_file="r.py", engine="local",
                             store=(home / "store").as_uri(), inputs={})
    records.set_run_state(run.name, "running")
    records.create_action(run=run.name, action_id="a0", task="r.fit", env="r", inputs={})
    records.set_action_state(run.name, "a0", "running")
    logs = home / "runs" / run.name / "logs"
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=str(logs / "a0.0.log"))
    folder = logs / "gang" / "a0.0" / "r0"
    folder.mkdir(parents=True)
    for n in (0, 1):
        (folder / f"node{n}.log").write_text(f"shoal-node {n}: Ray {NODES[n]['group']} node\n")
    (folder / "rank0.log").write_text("the driver says hi\n")
    records.add_event(run.name, "gang_started", "r.fit: gang started", action_id="a0",
                      data={"task": "r.fit", "restart": 0, "pids": [], "nnodes": 2,
                            "nproc_per_node": 1, "world_size": 2, "cause": "first_start",
                            "min_nnodes": 2, "max_nnodes": 2})
    records.add_event(run.name, "ray_cluster", "r.fit: ray_cluster", action_id="a0",
                      data={"task": "r.fit", "restart": 0, "dashboard_url": dashboard_url,
                            "address": "127.0.0.2:6379",
                            "client_address": "ray://127.0.0.2:10001", "nodes": NODES,
                            **(extra or {})})
    if state == "running":
        return records.get_run(run.name)
    for n, files in RAY_LOGS.items():
        ray_dir = folder / f"ray-node{n}"
        (ray_dir / "old").mkdir(parents=True)
        (ray_dir / "old" / "raylet.out").write_text("an older session's\n")
        for file, text in files.items():
            (ray_dir / file).write_text(text)
    records.finish_attempt(run.name, "a0", 0, state=state, exit_code=0)
    records.set_action_state(run.name, "a0", state)
    records.set_run_state(run.name, state)
    return records.get_run(run.name)
