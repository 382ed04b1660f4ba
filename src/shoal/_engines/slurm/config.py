"""The Slurm engine's settings: where its jobs go (partition, account, QoS), how long they may
run, what else sbatch is told, per environment; checked field by field when they are loaded.

    # slurm.yaml (shoal run --engine slurm --slurm-settings slurm.yaml)
    partition: gpu
    account: ml-team
    time_limit: "2-00:00:00"          # sbatch --time
    sbatch_options: ["--exclusive"]
    environments:                     # per environment, over the values above
      data: {partition: cpu, time_limit: "01:00:00"}
    priority_classes:                 # the Kueue priority-class label of a PodTemplate
      high: {qos: urgent}
    gpu_types: {H200: h200}           # Resources(gpu="H200:8") -> --gpus-per-node=h200:8
    container_runtime: pyxis          # Images run with srun --container-image
    python: /shared/venv/bin/python   # the interpreter on the nodes (default: this one)

Nothing here is a secret; the file may be committed next to the code.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from shoal._engines.settings_file import read_settings_file
from shoal.errors import SpecError

# Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds; also "infinite"/"unlimited".
_TIME = re.compile(r"^(\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2}|infinite|unlimited|UNLIMITED)$")
# A partition, account or QoS name: what Slurm accepts on its command line.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
CONTAINER_RUNTIMES = ("pyxis",)
PLACEMENT = ("partition", "account", "qos", "time_limit", "sbatch_options")
# Every sbatch option the script sets itself (`script.render`): the same in sbatch_options
# would be ambiguous. --ntasks and --gpus would undo one launcher per node / GPUs per node.
OWN_OPTIONS = ("--nodes", "--ntasks-per-node", "--ntasks", "--cpus-per-task", "--mem",
               "--gpus-per-node", "--job-name", "--output", "--open-mode", "--requeue",
               "--no-requeue", "--signal", "--partition", "--account", "--qos", "--time")
OWN_SHORT = ("-N", "-n", "-c", "-G", "-J", "-o", "-p", "-A", "-q", "-t")


@dataclass(frozen=True)
class Placement:
    """Where one environment's jobs go; None: the cluster's default."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    sbatch_options: tuple[str, ...] = ()

    def over(self, base: Placement) -> Placement:
        """These values where set, ``base``'s elsewhere (options add up)."""
        return Placement(
            partition=self.partition or base.partition, account=self.account or base.account,
            qos=self.qos or base.qos, time_limit=self.time_limit or base.time_limit,
            sbatch_options=(*base.sbatch_options, *self.sbatch_options))


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    sbatch_options: tuple[str, ...] = ()
    environments: Mapping[str, Placement] = field(default_factory=dict)
    priority_classes: Mapping[str, Placement] = field(default_factory=dict)
    container_runtime: str | None = None
    container_options: tuple[str, ...] = ()
    python: str = sys.executable
    store: str = ""
    poll_seconds: float = 1.0
    # Resources(gpu="H200:8")'s accelerator -> the GPU type in the cluster's gres.conf, so a
    # job asks --gpus-per-node=h200:8; an accelerator not here is asked for by count only.
    gpu_types: Mapping[str, str] = field(default_factory=dict)

    @property
    def placement(self) -> Placement:
        return Placement(self.partition, self.account, self.qos, self.time_limit,
                         self.sbatch_options)

    def placement_for(self, env: str, priority_class: str | None) -> Placement:
        """The settings' values, then the priority class's, then the environment's own."""
        where = self.placement
        if priority_class is not None:
            if priority_class not in self.priority_classes:
                known = ", ".join(sorted(self.priority_classes)) or "none"
                raise SpecError(f"TaskEnvironment({env!r}).pod_template priority-class label",
                                priority_class, "is not a priority class of the Slurm settings "
                                f"(known: {known})", "map it to a partition or QoS: "
                                f"priority_classes: {{{priority_class}: {{qos: ...}}}} in the "
                                "Slurm settings file")
            where = self.priority_classes[priority_class].over(where)
        if env in self.environments:
            where = self.environments[env].over(where)
        return where

    def to_json(self) -> str:
        def plain(p: Placement) -> dict[str, Any]:
            return {f.name: getattr(p, f.name) for f in fields(p)}

        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["environments"] = {k: plain(v) for k, v in self.environments.items()}
        data["priority_classes"] = {k: plain(v) for k, v in self.priority_classes.items()}
        return json.dumps(data)


def _string(where: str, key: str, value: object, pattern: re.Pattern[str] | None,
            example: str) -> str:
    if not isinstance(value, str) or not value or (pattern and not pattern.match(value)):
        rule = ("must be a Slurm time: minutes, HH:MM:SS or D-HH:MM:SS" if pattern is _TIME
                else "must be a name Slurm accepts (letters, digits, _ . -)"
                if pattern is _NAME else "must be a non-empty string")
        raise SpecError(f"{where}{key}", value, rule, f"e.g. {key}: {example}")
    return value


def _options(where: str, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(
            isinstance(o, str) and o.startswith("-") for o in value):
        raise SpecError(f"{where}{key}", value, "must be a list of sbatch options, each "
                        "starting with '-'", f'e.g. {key}: ["--exclusive", "--constraint=a100"]')
    return tuple(value)


def own_option(option: str) -> str | None:
    """The option of Shoal's own that ``option`` sets, if any. sbatch reads ``-p gpu``,
    ``-pgpu`` and an unambiguous prefix such as ``--part=gpu`` as the option itself."""
    if option.startswith("--"):
        name = re.split(r"[=\s]", option, maxsplit=1)[0]
        if name in OWN_OPTIONS:
            return name
        return next((o for o in OWN_OPTIONS if len(name) > 2 and o.startswith(name)), None)
    return option[:2] if option[:2] in OWN_SHORT else None


def check_options(field: str, options: tuple[str, ...]) -> None:
    """Refuse the options of ``options`` that Shoal sets itself."""
    for option in options:
        own = own_option(option)
        if own is not None:
            raise SpecError(field, option, f"sets {own}, which Shoal sets from the "
                            "environment and the settings' own fields", "use partition:/"
                            "account:/qos:/time_limit: in the settings, or Resources(...), "
                            "replicas and ClusterFailurePolicy(...) in the code")


def _placement(where: str, data: object) -> Placement:
    if not isinstance(data, Mapping):
        raise SpecError(where.rstrip("."), data, "must be a mapping of "
                        f"{', '.join(PLACEMENT)}", "e.g. {partition: cpu, qos: normal}")
    unknown = sorted(set(data) - set(PLACEMENT))
    if unknown:
        raise SpecError(f"{where}{unknown[0]}", data[unknown[0]], "is not a setting here "
                        f"(known: {', '.join(PLACEMENT)})", "remove it or fix its spelling")
    values: dict[str, Any] = {}
    for key in ("partition", "account", "qos"):
        if data.get(key) is not None:
            values[key] = _string(where, key, data[key], _NAME, "gpu")
    if data.get("time_limit") is not None:
        values["time_limit"] = _string(where, "time_limit", str(data["time_limit"]), _TIME,
                                       '"1-00:00:00"')
    if data.get("sbatch_options") is not None:
        values["sbatch_options"] = _options(where, "sbatch_options", data["sbatch_options"])
        check_options(f"{where}sbatch_options", values["sbatch_options"])
    return Placement(**values)


def settings_from_mapping(data: Mapping[str, Any], field_name: str) -> SlurmSettings:
    """Checked `SlurmSettings` from a mapping (a settings file's content)."""
    known = {f.name for f in fields(SlurmSettings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"{field_name}: {unknown[0]}", data[unknown[0]], "is not a Slurm "
                        f"setting (known: {', '.join(sorted(known))})",
                        "remove it or fix its spelling")
    base = _placement(f"{field_name}: ", {k: v for k, v in data.items() if k in PLACEMENT})
    values: dict[str, Any] = {f: getattr(base, f) for f in PLACEMENT}
    for key in ("environments", "priority_classes"):
        raw = data.get(key) or {}
        if not isinstance(raw, Mapping):
            raise SpecError(f"{field_name}: {key}", raw, "must map names to placements",
                            f"e.g. {key}: {{data: {{partition: cpu}}}}")
        values[key] = {str(k): _placement(f"{field_name}: {key}.{k}.", v)
                       for k, v in raw.items()}
    runtime = data.get("container_runtime")
    if runtime is not None and runtime not in CONTAINER_RUNTIMES:
        raise SpecError(f"{field_name}: container_runtime", runtime, "is not a container "
                        f"runtime Shoal drives (known: {', '.join(CONTAINER_RUNTIMES)})",
                        "use pyxis (srun --container-image), or leave it out to run the "
                        "nodes' own Python")
    values["container_runtime"] = runtime
    if data.get("container_options") is not None:
        values["container_options"] = _options(f"{field_name}: ", "container_options",
                                               data["container_options"])
    if data.get("python") is not None:
        values["python"] = _string(f"{field_name}: ", "python", data["python"], None,
                                   "/shared/venv/bin/python")
    if data.get("store") is not None:
        values["store"] = _string(f"{field_name}: ", "store", data["store"], None,
                                  "file:///shared/shoal/store")
    poll = data.get("poll_seconds", 1.0)
    if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0.05 <= poll <= 60:
        raise SpecError(f"{field_name}: poll_seconds", poll, "must be a number of seconds "
                        "from 0.05 to 60", "e.g. poll_seconds: 1")
    values["poll_seconds"] = float(poll)
    types = data.get("gpu_types") or {}
    if not isinstance(types, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and _NAME.match(v)
            for k, v in types.items()):
        raise SpecError(f"{field_name}: gpu_types", types, "must map accelerator names (as in "
                        "Resources(gpu='H200:8')) to the GPU types of the cluster's gres.conf",
                        "e.g. gpu_types: {H200: h200, A100-80GB: a100}")
    values["gpu_types"] = dict(types)
    return SlurmSettings(**values)


def load_settings(path: str | None, field_name: str, store: str) -> SlurmSettings:
    """The settings of a file (YAML or JSON; ``field_name`` says where its path came from),
    their store defaulting to ``store``. No file: every value is the cluster's default."""
    data = read_settings_file(path, field_name, "Slurm settings",
                              "partition: gpu\\naccount: ml-team") if path else {}
    settings = settings_from_mapping(data, field_name)
    return settings if settings.store else replace(settings, store=store)
