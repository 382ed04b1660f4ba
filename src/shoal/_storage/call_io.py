"""What a call's attempt folder in the store holds for a process that has no controller
connection (gang ranks, Kubernetes pods, the in-cluster driver): ``inputs.json`` (the input
literals), when the call carries one, ``context.json`` (its `shoal.custom_context`), and for
a run's driver elsewhere ``topology.json``: the gang sizes of the run's clustered environments
as the submitting process had them (``shoal run --override``), which the driver's own import
of the code does not see."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shoal._storage.store import Store, join
from shoal.errors import ObjectNotFound

INPUTS = "inputs.json"
CONTEXT = "context.json"
TOPOLOGY = "topology.json"


def put_call_io(store: Store, io: str, inputs: Mapping[str, Any],
                custom_context: Mapping[str, str]) -> None:
    store.put_bytes(join(io, INPUTS), json.dumps(dict(inputs)).encode())
    if custom_context:
        store.put_bytes(join(io, CONTEXT), json.dumps(dict(custom_context)).encode())


def get_inputs(store: Store, io: str) -> dict[str, Any]:
    inputs: dict[str, Any] = json.loads(store.get_bytes(join(io, INPUTS)))
    return inputs


def get_custom_context(store: Store, io: str) -> dict[str, str]:
    """The call's custom context; ``{}`` when it carried none (no file was written)."""
    try:
        values: dict[str, str] = json.loads(store.get_bytes(join(io, CONTEXT)))
    except ObjectNotFound:
        return {}
    return values


def put_topology(store: Store, io: str, topology: Mapping[str, Mapping[str, int]]) -> None:
    """``{environment: {"replicas": N, "nproc_per_node": N}}``; nothing when it is empty."""
    if topology:
        store.put_bytes(join(io, TOPOLOGY), json.dumps(
            {name: dict(sizes) for name, sizes in topology.items()}).encode())


def get_topology(store: Store, io: str) -> dict[str, dict[str, int]]:
    """The topology the submitter wrote; ``{}`` when the run has no clustered environment."""
    try:
        values: dict[str, dict[str, int]] = json.loads(store.get_bytes(join(io, TOPOLOGY)))
    except ObjectNotFound:
        return {}
    return values
