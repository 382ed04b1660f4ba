"""The seed's manifests, whole, against files kept in ``golden/``: a change to the compiler
shows up as a diff of the YAML a cluster would receive.

Rewrite the files after an intended change with ``SHOAL_UPDATE_GOLDEN=1 pytest
tests/kubernetes/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
import yaml

from shoal._engines.kubernetes import to_yaml
from tests.kubernetes.conftest import seed_manifests

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SHOAL_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("name", ["data", "pretrain", "driver", "rbac"])
def test_manifests_match_the_golden_files(name: str) -> None:
    text = to_yaml(seed_manifests()[name])
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        path.write_text(text)
    if not path.exists():
        pytest.fail(f"{path} is missing: create it with SHOAL_UPDATE_GOLDEN=1")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}.yaml", "generated"))
        pytest.fail(f"the manifests changed (rewrite with SHOAL_UPDATE_GOLDEN=1 if "
                    f"intended):\n{diff}")


def test_yaml_reads_back_as_the_same_objects() -> None:
    for objects in seed_manifests().values():
        assert list(yaml.safe_load_all(to_yaml(objects))) == objects


def test_compiling_is_deterministic() -> None:
    assert seed_manifests() == seed_manifests()
