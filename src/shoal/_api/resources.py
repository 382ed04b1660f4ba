"""`Resources`: what one task process (or one node of a clustered task) asks for.

``cpu=(2, 4)`` and ``memory=("4Gi", "8Gi")`` are (request, limit); a single value means
request == limit. Quantities use Kubernetes syntax (see ``quantity.py``) and are validated here,
at construction, so a bad spec fails where it is written rather than when a pod is rejected.

``gpu`` is a per-node count (``gpu=8``), an accelerator and a count (``gpu="H200:8"``), or a
``shoal.GPU(...)`` / ``shoal.Device(...)``. A bare accelerator name (``gpu="L4"``) means one of
it, which is how people say it. Flyte's spellings (``"A100 80G:8"``, ``"L40s:1"``) are taken and
kept as Shoal's names (``"A100-80G"``, ``"L40S"``, see ``accelerators.py``). Accelerator names
outside the known list are allowed (clusters name their own node pools); a known name in the
wrong case (``"h200"``) is an error, because node selectors match case-sensitively and the job
would wait forever for a node that does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal, Protocol, TypeAlias

from shoal._api.accelerators import Device, shoal_accelerator
from shoal._api.quantity import (
    Quantity,
    canonical,
    parse_cpu,
    parse_memory,
    to_bytes,
    to_cores,
)
from shoal.errors import SpecError

__all__ = ["GPU_RESOURCE", "KNOWN_ACCELERATORS", "Resources"]

# The extended-resource name GPUs are requested under on Kubernetes.
GPU_RESOURCE = "nvidia.com/gpu"
# Accelerator names Shoal knows, for "did you mean" on a wrong-case spelling. Others are allowed.
KNOWN_ACCELERATORS: tuple[str, ...] = (
    "A10", "A10G", "A100", "A100-80G", "B100", "B200", "B300", "GB10", "GB200", "H100",
    "H100-MIG", "H200", "L4", "L40", "L40S", "MI250X", "MI300X", "P100", "RTX-PRO-6000", "T4",
    "V100",
)
# An accelerator name ends up in a node-selector label value: the same grammar and length.
_ACCELERATOR = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")

# Upper bounds on what one process or node may ask for: past the largest machines built, so a
# value above is a typo ("cpu=1e9", "memory='1e30Gi'"), refused before anything is planned.
MAX_CPU = 4096  # cores; the largest single machines have a few thousand hardware threads
MAX_MEMORY = 64 * 2**40  # 64Ti; the largest shared-memory machines have a few tens of TiB
MAX_DISK = 2**50  # 1Pi of ephemeral disk
# nvidia.com/gpu per node: 8 on most GPU nodes, 16 on the largest, 56 MIG slices of 8 GPUs.
MAX_GPU = 64

CpuValue: TypeAlias = "int | float | str | Quantity"
MemoryValue: TypeAlias = "int | str | Quantity"


@dataclass(frozen=True, kw_only=True)
class Resources:
    """CPU, memory, GPUs, ephemeral disk and shared memory for one task process or node.

    Args:
        cpu: cores, as ``2``, ``0.5``, ``"500m"`` or ``(request, limit)`` such as ``(2, 4)``
            (a two-item list is taken as the same pair).
        memory: bytes, as ``"4Gi"``, an int, or ``(request, limit)`` such as ``("4Gi", "8Gi")``.
        gpu: ``8`` (a count), ``"H200:8"`` (accelerator and count), ``"L4"`` (one L4), Flyte's
            ``"A100 80G:8"``, or ``shoal.GPU("H100", 8)``.
        disk: ephemeral storage, a memory-like quantity such as ``"200Gi"``.
        shm: size of ``/dev/shm`` (``"16Gi"``), or ``"auto"``: a memory-backed ``/dev/shm``
            with no size of its own, bounded by the memory limit.

    The fields keep what was passed; the typed accessors (``cpu_request``,
    ``memory_limit_bytes``, ``gpu_count``, ...) give the parsed values. Two ``Resources`` are
    equal when they ask for the same amounts, however they were spelled.
    """

    cpu: CpuValue | tuple[CpuValue, CpuValue] | None = field(default=None, compare=False)
    memory: MemoryValue | tuple[MemoryValue, MemoryValue] | None = field(
        default=None, compare=False
    )
    gpu: int | str | Device | None = field(default=None, compare=False)
    disk: MemoryValue | None = field(default=None, compare=False)
    shm: MemoryValue | Literal["auto"] | None = field(default=None, compare=False)

    # Parsed values, set in __post_init__; these are what equality and hashing compare.
    _cpu: tuple[Quantity, Quantity] | None = field(init=False, repr=False, default=None)
    _memory: tuple[Quantity, Quantity] | None = field(init=False, repr=False, default=None)
    _gpu_count: int = field(init=False, repr=False, default=0)
    _accelerator: str | None = field(init=False, repr=False, default=None)
    _disk: Quantity | None = field(init=False, repr=False, default=None)
    _shm: Quantity | Literal["auto"] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        # A list pair is accepted like a tuple pair; keep a tuple so the object stays immutable.
        for name in ("cpu", "memory"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        cpu = _request_limit("cpu", self.cpu, parse_cpu)
        _bounded("cpu", self.cpu, cpu, MAX_CPU, "cores")
        object.__setattr__(self, "_cpu", cpu)
        memory = _request_limit("memory", self.memory, parse_memory)
        _bounded("memory", self.memory, memory, MAX_MEMORY, "bytes")
        object.__setattr__(self, "_memory", memory)
        count, accelerator = _parse_gpu(self.gpu)
        object.__setattr__(self, "_gpu_count", count)
        object.__setattr__(self, "_accelerator", accelerator)
        disk = None if self.disk is None else parse_memory(self.disk, field="disk")
        _bounded("disk", self.disk, None if disk is None else (disk, disk), MAX_DISK, "bytes")
        object.__setattr__(self, "_disk", disk)
        shm = _parse_shm(self.shm)
        _bounded("shm", self.shm, None if not isinstance(shm, Quantity) else (shm, shm),
                 MAX_MEMORY, "bytes")
        object.__setattr__(self, "_shm", shm)

    # --- typed accessors -------------------------------------------------------------------

    @property
    def cpu_request(self) -> float | None:
        """Requested cores, or None when ``cpu`` was not given."""
        return None if self._cpu is None else to_cores(self._cpu[0])

    @property
    def cpu_limit(self) -> float | None:
        """Core limit, or None when ``cpu`` was not given."""
        return None if self._cpu is None else to_cores(self._cpu[1])

    @property
    def memory_request_bytes(self) -> int | None:
        """Requested memory in bytes, or None when ``memory`` was not given."""
        return None if self._memory is None else to_bytes(self._memory[0])

    @property
    def memory_limit_bytes(self) -> int | None:
        """Memory limit in bytes, or None when ``memory`` was not given."""
        return None if self._memory is None else to_bytes(self._memory[1])

    @property
    def gpu_count(self) -> int:
        """GPUs per process/node; 0 when ``gpu`` was not given."""
        return self._gpu_count

    @property
    def accelerator(self) -> str | None:
        """The accelerator name from ``gpu="H200:8"``, or None for a bare count or no GPU."""
        return self._accelerator

    @property
    def disk_bytes(self) -> int | None:
        """Ephemeral storage in bytes, or None when ``disk`` was not given."""
        return None if self._disk is None else to_bytes(self._disk)

    @property
    def shm_bytes(self) -> int | None:
        """Size of ``/dev/shm`` in bytes; None when ``shm`` is not given or is ``"auto"``."""
        return None if self._shm is None or self._shm == "auto" else to_bytes(self._shm)

    @property
    def shm_auto(self) -> bool:
        """True for ``shm="auto"``: a memory-backed ``/dev/shm`` without its own size limit."""
        return self._shm == "auto"

    @property
    def shm_quantity(self) -> str | None:
        """The canonical ``/dev/shm`` size for an emptyDir ``sizeLimit``; None if unset/auto."""
        return None if self._shm is None or self._shm == "auto" else canonical(self._shm)

    # --- Kubernetes ------------------------------------------------------------------------

    def to_k8s(self) -> dict[str, dict[str, str]]:
        """Container ``resources``: ``{"requests": {...}, "limits": {...}}``, canonical text.

        Both keys are always present (possibly empty). GPUs go under ``nvidia.com/gpu`` in both
        (Kubernetes requires request == limit for extended resources), disk under
        ``ephemeral-storage`` in both. ``shm`` is not a container resource: the manifest
        compiler mounts it as a memory-backed emptyDir (see ``shm_quantity``/``shm_auto``).
        """
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}
        if self._cpu is not None:
            requests["cpu"] = canonical(self._cpu[0])
            limits["cpu"] = canonical(self._cpu[1])
        if self._memory is not None:
            requests["memory"] = canonical(self._memory[0])
            limits["memory"] = canonical(self._memory[1])
        if self._disk is not None:
            requests["ephemeral-storage"] = canonical(self._disk)
            limits["ephemeral-storage"] = canonical(self._disk)
        if self._gpu_count:
            requests[GPU_RESOURCE] = str(self._gpu_count)
            limits[GPU_RESOURCE] = str(self._gpu_count)
        return {"requests": requests, "limits": limits}


# --- parsing helpers -------------------------------------------------------------------------


def _request_limit(
    name: str, value: object, parse: _Parser
) -> tuple[Quantity, Quantity] | None:
    if value is None:
        return None
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != 2:
            raise SpecError(
                name, value, "a sequence must be exactly (request, limit)",
                f"use {name}=(request, limit), e.g. {_pair_example(name)}, or one value",
            )
        request = parse(value[0], field=f"{name} request")
        limit = parse(value[1], field=f"{name} limit")
        if limit.value < request.value:
            raise SpecError(
                name, value,
                f"the limit ({canonical(limit)}) is below the request ({canonical(request)})",
                f"swap them: {name}=({value[1]!r}, {value[0]!r}), or raise the limit",
            )
        return request, limit
    q = parse(value, field=name)
    return q, q


def _bounded(name: str, given: object, parsed: tuple[Quantity, Quantity] | None, most: int,
             unit: str) -> None:
    """A limit of 0 leaves nothing to run in (a request of 0 under a limit is fine:
    ``cpu=(0, 2)``); a limit above ``most`` is no machine's."""
    if parsed is None:
        return
    limit = parsed[1]
    if limit.value == 0:
        if name in ("disk", "shm"):
            fix = f"leave {name} out (no {name} of its own)"
        else:
            fix = f"leave {name} out, or request nothing under a limit: {_zero_request(name)}"
        raise SpecError(name, given, f"a {name} limit of 0 leaves a task nothing to run in",
                        fix)
    if limit.value > most:
        shown = canonical(Quantity(Fraction(most), "BinarySI" if unit == "bytes" else "DecimalSI"))
        written = shown if unit == "cores" else repr(shown)
        raise SpecError(name, given, f"asks for {canonical(limit)}, more than any machine has "
                        f"(at most {shown} per process or node)",
                        f"use at most {name}={written}; spread a bigger job over "
                        "ClusteredTaskEnvironment(replicas=...)")


def _zero_request(name: str) -> str:
    return "cpu=(0, 1)" if name == "cpu" else 'memory=(0, "1Gi")'


class _Parser(Protocol):
    def __call__(self, value: object, *, field: str) -> Quantity: ...


def _pair_example(name: str) -> str:
    return "(2, 4)" if name == "cpu" else '("4Gi", "8Gi")'


def _parse_gpu(value: object) -> tuple[int, str | None]:
    if value is None:
        return 0, None
    if isinstance(value, bool):
        raise SpecError("gpu", value, "a bool is not a GPU count", 'use gpu=1 or gpu="H100:1"')
    if isinstance(value, int):
        if value < 0:
            raise SpecError("gpu", value, "must not be negative", "use gpu=0 or more")
        return _gpu_bounded(value, value), None
    if isinstance(value, Device):
        return _gpu_bounded(value.quantity, value), value.accelerator()
    if not isinstance(value, str):
        if isinstance(value, float):
            fix = f"GPUs are whole devices; use gpu={max(1, round(value))}"
        else:
            fix = 'use gpu=8 or gpu="H200:8"'
        raise SpecError("gpu", value, 'must be an int count or an "ACCELERATOR:COUNT" string', fix)
    name, sep, count_text = value.partition(":")
    name = shoal_accelerator(name, "gpu", value)
    if value.strip().isdigit():
        raise SpecError(
            "gpu", value, "a string names an accelerator; a count alone is an int",
            f"use gpu={int(value.strip())}",
        )
    if not name:
        fix = f"use gpu={int(count_text)}" if count_text.isdigit() else 'use gpu="H200:8"'
        raise SpecError("gpu", value, "the accelerator name before ':' is empty", fix)
    if not _ACCELERATOR.match(name):
        raise SpecError(
            "gpu", value,
            "the accelerator name must be 1-63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit",
            f'use a name such as "H200", e.g. gpu="H200:{count_text or 1}"',
        )
    for known in KNOWN_ACCELERATORS:
        if name != known and name.upper() == known.upper():
            raise SpecError(
                "gpu", value, "accelerator names are case-sensitive",
                f"did you mean {known + sep + count_text!r}?",
            )
    if not sep:
        return 1, name
    if not count_text.isdigit() or not count_text.isascii():
        raise SpecError(
            "gpu", value, "the count after ':' must be a whole number >= 0",
            f'use gpu="{name}:1" (or another whole count)',
        )
    if int(count_text) == 0:
        # gpu=0 means no GPU; naming an accelerator still pins the pod to its nodes.
        raise SpecError("gpu", value, f"names {name} but asks for 0 of them (the pod would "
                        f"still be pinned to {name} nodes without getting a GPU)",
                        f'drop gpu= or ask for at least 1: gpu="{name}:1"')
    return _gpu_bounded(int(count_text), value), name


def _gpu_bounded(count: int, given: object) -> int:
    if count > MAX_GPU:
        raise SpecError("gpu", given, f"asks for {count} GPUs per process or node; a node has "
                        f"at most {MAX_GPU} (8 on most GPU nodes)",
                        f"use at most {MAX_GPU}; spread more over "
                        "ClusteredTaskEnvironment(replicas=...)")
    return count


def _parse_shm(value: object) -> Quantity | Literal["auto"] | None:
    if value is None:
        return None
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.strip().lower() == "auto":
        raise SpecError(
            "shm", value, '"auto" is spelled in lower case, without spaces', 'did you mean "auto"?'
        )
    return parse_memory(value, field="shm")
