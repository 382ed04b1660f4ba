"""Run records: runs, actions, attempts and events in one SQLite file, and the records of a run
whose driver runs elsewhere, published to the store.

This ``__init__`` is the package's only door: code outside ``_storage/records/`` imports the
names in ``__all__`` from ``shoal._storage.records``, never one of its modules
(tests/unit/test_layers.py). `Records` is assembled from its modules, bottom to top:

- ``schema.py``: the record types, their states, the tables and their migrations;
- ``rows.py``: column lists, JSON columns, row → record;
- ``sqlite.py``: the file itself (per-thread connections, WAL, retried transactions);
- ``actions.py``: the action, attempt and event methods;
- ``mirror.py``: a remote driver's records merged into the local file;
- ``runs.py``: `Records` itself, the run methods, and finding runs whose engine died;
- ``remote.py``: the driver's side (`RecordsPublisher`) and the reader's (`refresh`,
  `driver_folder`, `put_request`) of the records a remote driver keeps in the store.

The rule for what loads with the package: everything here is light but ``sqlite3``, which a
caller of `Records` needs anyway, and ``psutil``, imported inside the calls that need it.
``import shoal`` does not import this package (tests/unit/test_layers.py); no module needs a
lazy door.
"""

from __future__ import annotations

from shoal._storage.records.remote import (
    RECORDS,
    SUBMITTED,
    RecordsPublisher,
    driver_folder,
    local_log,
    put_request,
    refresh,
    unreachable,
)
from shoal._storage.records.runs import (
    ACTION_STATES,
    ATTEMPT_STATES,
    PREEMPT_REQUEST,
    RUN_STATES,
    SCHEMA_VERSION,
    TERMINAL_STATES,
    ActionRecord,
    AttemptRecord,
    EventRecord,
    Records,
    RunRecord,
)

__all__ = [
    "ACTION_STATES",
    "ATTEMPT_STATES",
    "PREEMPT_REQUEST",
    "RECORDS",
    "RUN_STATES",
    "SCHEMA_VERSION",
    "SUBMITTED",
    "TERMINAL_STATES",
    "ActionRecord",
    "AttemptRecord",
    "EventRecord",
    "Records",
    "RecordsPublisher",
    "RunRecord",
    "driver_folder",
    "local_log",
    "put_request",
    "refresh",
    "unreachable",
]
