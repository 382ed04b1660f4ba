"""Reading an engine's settings file (Kubernetes, Slurm): YAML or JSON, a mapping of fields.

Errors name the option the path came from (``--slurm-settings``, ``$SHOAL_KUBE_SETTINGS``...),
the path and what is wrong; the engine then checks each field itself.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from shoal.errors import SpecError


def _yaml(text: str) -> Any:
    """YAML without base-60 numbers: YAML 1.1 reads ``time_limit: 12:00:00`` as 43200 and
    ``30:00`` as 1800 (sbatch would take those for minutes); here they stay the text written."""
    import yaml

    loader: Any = type("SettingsLoader", (yaml.SafeLoader,), {})
    numbers = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    loader.yaml_implicit_resolvers = {
        first: [(tag, re.compile("(?!.*:)" + rx.pattern, rx.flags) if tag in numbers else rx)
                for tag, rx in resolvers]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    return yaml.load(text, Loader=loader)  # a SafeLoader: no Python objects


def _parse(text: str, path: str, field_name: str) -> Any:
    """JSON, else YAML (``{partition: gpu}`` is YAML's flow style, not JSON)."""
    import yaml

    if text.lstrip().startswith("{"):
        with contextlib.suppress(json.JSONDecodeError):
            return json.loads(text)
    try:
        return _yaml(text)
    except yaml.YAMLError as e:
        raise SpecError(field_name, path, "is not valid YAML: " + " ".join(str(e).split()),
                        "fix the file's syntax") from e


def read_settings_file(path: str, field_name: str, what: str, example: str) -> dict[str, Any]:
    """The mapping in the file at ``path`` ({} for an empty file). ``what`` names the fields
    it holds ("Slurm settings"), ``example`` is two lines of them for the fix."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SpecError(field_name, path, f"cannot be read: {e.strerror}",
                        f"pass the path of a YAML file of {what}") from e
    loaded = _parse(text, path, field_name)
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise SpecError(field_name, path, f"must hold a mapping of {what}", f"e.g. {example}")
    return loaded
