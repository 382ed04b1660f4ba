"""The bridge setting: ``tensorboard:DIR,wandb[:rank0]`` (``shoal run --metrics``,
``SHOAL_METRICS_BRIDGES``, ``with_runcontext(metrics=...)``), checked before anything starts."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

from shoal.errors import SpecError

KINDS = ("tensorboard", "wandb")
PACKAGES = {"tensorboard": ("tensorboardX", "tensorboard"), "wandb": ("wandb", "wandb")}
SYNTAX = "tensorboard:DIR and/or wandb[:rank0], comma-separated"


@dataclass(frozen=True)
class BridgeSpec:
    kind: str  # "tensorboard" | "wandb"
    folder: str | None = None  # tensorboard: where the event files go (absolute)
    rank0_only: bool = False  # wandb: only rank 0 (and plain calls), not one run per rank

    def describe(self) -> str:
        if self.kind == "tensorboard":
            return f"tensorboard:{self.folder}"
        return "wandb:rank0" if self.rank0_only else "wandb"


def parse_bridges(text: str | None, field: str) -> tuple[BridgeSpec, ...]:
    """The bridges ``text`` asks for (none for None or ""); `SpecError` naming ``field``."""
    if text is None or not text.strip():
        return ()
    out: list[BridgeSpec] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            raise SpecError(field, text, f"an empty entry; the setting is {SYNTAX}",
                            "e.g. --metrics tensorboard:runs/tb,wandb")
        kind, _, arg = item.partition(":")
        kind = kind.strip().lower()
        if kind not in KINDS:
            import difflib

            near = difflib.get_close_matches(kind, KINDS, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise SpecError(field, item, f"unknown bridge {kind!r}; known: {', '.join(KINDS)}",
                            f"{hint}use {SYNTAX}")
        if any(b.kind == kind for b in out):
            raise SpecError(field, text, f"names the {kind} bridge twice",
                            f"keep one {kind} entry")
        out.append(_one(kind, arg.strip(), item, field))
    return tuple(out)


def _one(kind: str, arg: str, item: str, field: str) -> BridgeSpec:
    if kind == "tensorboard":
        if not arg:
            raise SpecError(field, item, "the tensorboard bridge needs the folder of its event "
                            "files", "use tensorboard:DIR, e.g. tensorboard:runs/tb")
        return BridgeSpec(kind, folder=os.path.abspath(os.path.expanduser(arg)))
    if arg not in ("", "rank0"):
        raise SpecError(field, item, "wandb takes no option but 'rank0' (only rank 0 is sent)",
                        "use wandb (one W&B run per rank) or wandb:rank0")
    return BridgeSpec(kind, rank0_only=arg == "rank0")


def check_installed(bridges: tuple[BridgeSpec, ...], field: str) -> None:
    """Each bridge's package is importable here (the driver), or a `SpecError` saying how."""
    for bridge in bridges:
        module, extra = PACKAGES[bridge.kind]
        if importlib.util.find_spec(module) is None:
            raise SpecError(field, bridge.describe(), f"the {bridge.kind} bridge needs the "
                            f"{module} package, which is not installed",
                            f"pip install 'shoal[{extra}]' (or pip install {module})")
