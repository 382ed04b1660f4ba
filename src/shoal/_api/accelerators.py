"""Flyte 2's accelerator names and device helpers, mapped onto Shoal's GPU names.

Flyte writes accelerators as people say them (``"A100 80G:8"``, ``"L40s:1"``); Shoal's names
end up in node-selector label values and the Kubernetes engine's ``accelerators`` table, so they
may not contain spaces (``"A100-80G"``, ``"L40S"``). ``shoal_accelerator`` turns the one into
the other, so ``Resources(gpu="A100 80G:8")`` and ``Resources(gpu="A100-80G:8")`` are the same
request and reach the same node selector.

``GPU(device=, quantity=, partition=)`` and ``Device`` follow Flyte's signatures. A MIG
partition maps to its own accelerator name, ``"<GPU>-MIG-<profile>"`` (``"A100-MIG-1g.5gb"``):
under the NVIDIA GPU operator's *single* MIG strategy each slice is a whole ``nvidia.com/gpu``
on a node labelled with that profile, which is what Shoal can request. ``TPU()``,
``Neuron()``, ``AMD_GPU()``, ``HABANA_GAUDI()`` and Flyte's Neuron and Gaudi strings
(``"Trn1:16"``) are refused: Shoal requests NVIDIA GPUs (``nvidia.com/gpu``) only.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from shoal.errors import SpecError

__all__ = ["AMD_GPU", "GPU", "HABANA_GAUDI", "TPU", "Device", "Neuron", "shoal_accelerator"]

DeviceClass = Literal["GPU", "TPU", "NEURON", "AMD_GPU", "HABANA_GAUDI"]

# Flyte's GPU names that Shoal spells differently; Flyte's other names are Shoal's too.
FLYTE_NAMES: dict[str, str] = {
    "A100 80G": "A100-80G",
    "L40s": "L40S",
    "RTX PRO 6000": "RTX-PRO-6000",
}
# Flyte's GPU types (``flyte.GPU(device=...)`` accepts exactly these).
FLYTE_GPUS: tuple[str, ...] = (
    "A10", "A10G", "A100", "A100 80G", "B200", "H100", "H200", "L4", "L40s", "T4", "V100",
    "RTX PRO 6000", "GB10",
)
# MIG profiles per GPU, as NVIDIA names them (and Flyte accepts them).
MIG_PROFILES: dict[str, tuple[str, ...]] = {
    "A100": ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100 80G": ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100": ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H200": ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}
# Flyte's accelerator strings for devices that are not NVIDIA GPUs ("Trn1:8", "Gaudi1:1").
NOT_NVIDIA: dict[str, str] = {
    **dict.fromkeys(("Inf1", "Inf2", "Trn1", "Trn1n", "Trn2", "Trn2u"), "AWS Neuron devices"),
    "Gaudi1": "Habana Gaudi devices",
}
_NOT_NVIDIA = ("Shoal requests NVIDIA GPUs (nvidia.com/gpu) only; {what} are not supported",
               'use an NVIDIA GPU, e.g. gpu="H100:8" or shoal.GPU("H100", 8)')


def _did_you_mean(name: str, known: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6) or \
        difflib.get_close_matches(name.upper(), [k.upper() for k in known], n=1, cutoff=0.6)
    if not close:
        return ""
    match = next((k for k in known if k.upper() == close[0].upper()), close[0])
    return f'did you mean "{match}"? '


def shoal_accelerator(name: str, field: str = "gpu", value: object = None) -> str:
    """Shoal's name for an accelerator written the Flyte way (``"A100 80G"`` -> ``"A100-80G"``).

    A name that is not one of Flyte's and cannot be a label value (it has a space) is refused
    with the known names; other names pass through unchanged for ``Resources`` to check.
    """
    if name in FLYTE_NAMES:
        return FLYTE_NAMES[name]
    if name in NOT_NVIDIA:
        rule, fix = _NOT_NVIDIA
        raise SpecError(field, value if value is not None else name,
                        rule.format(what=NOT_NVIDIA[name]), fix)
    if " " in name:
        for flyte in FLYTE_NAMES:  # "a100 80g": right name, wrong case
            if name.upper() == flyte.upper():
                raise SpecError(field, value if value is not None else name,
                                "accelerator names are case-sensitive",
                                f'did you mean "{flyte}"?')
        known = ", ".join(FLYTE_GPUS)
        raise SpecError(field, value if value is not None else name,
                        f"{name!r} is not a known accelerator name (known: {known})",
                        f"{_did_you_mean(name, FLYTE_GPUS)}a name with spaces must be one of "
                        "these; a cluster's own accelerator names have none "
                        '(gpu="nvidia-a100:8")')
    return name


@dataclass(frozen=True)
class Device:
    """An accelerator request, as Flyte's ``flyte.Device``; ``Resources(gpu=Device(...))``."""

    quantity: int
    device_class: DeviceClass = "GPU"
    device: str | None = None
    partition: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.quantity, bool) or not isinstance(self.quantity, int) \
                or self.quantity < 1:
            raise SpecError("Device.quantity", self.quantity, "must be a whole number >= 1",
                            "e.g. GPU('H100', 8)")
        if self.device_class != "GPU":
            what, fix = _NOT_NVIDIA
            raise SpecError("Device.device_class", self.device_class,
                            what.format(what=f"{self.device_class} devices"), fix)
        if self.partition is not None:
            _mig_name(self.device, self.partition)

    def accelerator(self) -> str | None:
        """Shoal's accelerator name for this device (None: any GPU)."""
        if self.device is None:
            return None
        if self.partition is not None:
            return _mig_name(self.device, self.partition)
        return shoal_accelerator(self.device, "Device.device", self.device)


def _mig_name(device: str | None, partition: str) -> str:
    if device is None or device not in MIG_PROFILES:
        gpus = ", ".join(MIG_PROFILES)
        raise SpecError("GPU.partition", partition,
                        f"MIG partitions exist on {gpus}, not on {device!r}",
                        f"drop partition=, or use one of {gpus}")
    profiles = MIG_PROFILES[device]
    if partition not in profiles:
        raise SpecError("GPU.partition", partition,
                        f"is not a MIG profile of {device} (profiles: {', '.join(profiles)})",
                        f"{_did_you_mean(partition, profiles)}use one of them")
    return f"{FLYTE_NAMES.get(device, device)}-MIG-{partition}"


def GPU(device: str, quantity: int = 1, partition: str | None = None) -> Device:
    """``quantity`` NVIDIA GPUs of type ``device`` (Flyte's names: "A100 80G", "H100", "L4"...).

    With ``partition`` (a MIG profile such as ``"1g.5gb"``), each GPU is one MIG slice.
    """
    if device not in FLYTE_GPUS:
        raise SpecError("GPU.device", device,
                        f"is not a GPU type Flyte names (known: {', '.join(FLYTE_GPUS)})",
                        f"{_did_you_mean(device, FLYTE_GPUS)}or pass the name straight to "
                        f'Resources(gpu="{device}:{quantity}") for a cluster\'s own name')
    return Device(quantity=quantity, device_class="GPU", device=device, partition=partition)


def _refuse(what: str, device: object) -> Device:
    rule, fix = _NOT_NVIDIA
    raise SpecError("gpu", device, rule.format(what=what), fix)


def TPU(device: str, partition: str | None = None) -> Device:
    """Refused: Shoal cannot request TPUs (it schedules NVIDIA GPUs)."""
    return _refuse("TPUs", device)


def Neuron(device: str) -> Device:
    """Refused: Shoal cannot request AWS Neuron devices."""
    return _refuse("AWS Neuron devices", device)


def AMD_GPU(device: str) -> Device:
    """Refused: Shoal cannot request AMD GPUs (amd.com/gpu)."""
    return _refuse("AMD GPUs (amd.com/gpu)", device)


def HABANA_GAUDI(device: str) -> Device:
    """Refused: Shoal cannot request Habana Gaudi devices."""
    return _refuse("Habana Gaudi devices", device)
