"""W&B offline runs read back from their ``run-<id>.wandb`` files, for the tests.

A ``.wandb`` file is W&B's record log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
then 32 KiB blocks of LevelDB-log records (CRC32 4 bytes, length 2, type 1: full, first,
middle, last), each a protobuf ``wandb.proto.wandb_internal_pb2.Record``. Only what the tests
check is kept: the run's id, group, name, project, tags, config keys, and the history keys it
logged with their values.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto.wandb_internal_pb2 import Record

HEADER = 7
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    folder: Path
    run_id: str = ""
    group: str = ""
    name: str = ""
    project: str = ""
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    history: dict[str, list[Any]] = field(default_factory=dict)  # key -> values, in order
    exit_code: int | None = None


def records(path: Path) -> list[Record]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    out, pending, at = [], b"", HEADER
    while at + 7 <= len(data):
        left = BLOCK - at % BLOCK
        if left < 7:  # a block's tail too short for a record header is padding
            at += left
            continue
        length, kind = struct.unpack("<HB", data[at + 4:at + 7])
        if kind == 0 and length == 0:  # zero padding to the end of the block
            at += left
            continue
        chunk = data[at + 7:at + 7 + length]
        at += 7 + length
        if kind == FULL:
            out.append(Record.FromString(chunk))
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(Record.FromString(pending + chunk))
    return out


def read_run(folder: Path) -> OfflineRun:
    """The run of one ``offline-run-*`` folder."""
    (path,) = folder.glob("run-*.wandb")
    run = OfflineRun(folder)
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id, run.group, run.name, run.project = (r.run_id, r.run_group,
                                                            r.display_name, r.project)
            run.tags = tuple(r.tags)
            for item in r.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                run.history.setdefault(key, []).append(json.loads(item.value_json))
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def read_runs(wandb_dir: Path) -> list[OfflineRun]:
    """Every offline run under ``wandb_dir`` (the folder holding ``offline-run-*``)."""
    return [read_run(f) for f in sorted(wandb_dir.glob("offline-run-*"))]
