"""The seed's manifests, whole, against files kept in ``golden/``: a change to the compiler
shows up as a diff of the YAML a cluster would receive.

Rewrite the files after an intended change with ``SHOAL_UPDATE_GOLDEN=1 pytest
tests/kubernetes/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

import shoal
from shoal._engines.kubernetes import compile_call, to_yaml
from tests.kubernetes import seed_program
from tests.kubernetes.conftest import (
    CODE,
    CONFIG,
    RUN,
    call_of,
    elastic_manifests,
    seed_manifests,
)

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SHOAL_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("name", ["data", "pretrain", "driver", "rbac", "elastic",
                                  "elastic_shrunk", "elastic_probe"])
def test_manifests_match_the_golden_files(name: str) -> None:
    text = to_yaml({**seed_manifests(), **elastic_manifests()}[name])
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


def profiled_pretrain() -> list[dict[str, Any]]:
    """The seed's gang with ``--profile pretrain:ranks=0,3:steps=10-12:tool=nsys``: every pod
    carries the setting, and the launcher in it starts ranks 0 and 3 under ``nsys profile``
    (reports go to the pod's home, then to the store)."""
    from shoal._driver.run_options import RunOptions

    call = call_of(seed_program.train)
    profile = shoal.Profile(ranks=[0, 3], steps=(10, 12), tool="nsys").spec()
    call = RunOptions(profiles={call.task.env.name: profile}).apply(call)
    return compile_call(call, run=RUN, action="a0.1", attempt=0, config=CONFIG, code=CODE)


def test_a_profiled_gang_matches_its_golden_file() -> None:
    text = to_yaml(profiled_pretrain())
    path = GOLDEN / "pretrain_nsys.yaml"
    if UPDATE:
        path.write_text(text)
    expected = path.read_text()
    diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                        "golden/pretrain_nsys.yaml", "generated"))
    assert text == expected, f"rewrite with SHOAL_UPDATE_GOLDEN=1 if intended:\n{diff}"
    plain = to_yaml(seed_manifests()["pretrain"])
    changed = [line.split() for line in difflib.ndiff(plain.splitlines(), text.splitlines())
               if line.startswith(("+ ", "- "))]
    assert changed == [["+", "-", "name:", "SHOAL_PROFILE"],
                       ["+", "value:", "ranks=0,3:steps=10-12:tool=nsys"]]


def test_an_elastic_gangs_shrunk_start_differs_from_its_first_only_where_a_start_does() -> None:
    """Restart 1 after node 1 was lost: a JobSet of its own (its name, its restart label), of 3
    nodes where the first had 4, told its size, restart number and cause; nothing else (its
    bounds, SHOAL_MIN_NNODES=2 and SHOAL_MAX_NNODES=4, are the same in both)."""
    first, shrunk = (to_yaml(elastic_manifests()[k]) for k in ("elastic", "elastic_shrunk"))
    changed = [line.strip() for line in difflib.ndiff(first.splitlines(), shrunk.splitlines())
               if line.startswith(("+ ", "- "))]
    minus = [line[2:].strip() for line in changed if line.startswith("-")]
    plus = [line[2:].strip() for line in changed if line.startswith("+")]
    assert "shoal.dev/restart: '0'" in minus and "shoal.dev/restart: '1'" in plus
    assert "completions: 4" in minus and "completions: 3" in plus
    assert "parallelism: 4" in minus and "parallelism: 3" in plus
    # a first start's cause is the launcher's default, so only a later one is spelled out
    assert "- name: SHOAL_START_CAUSE" in plus and "value: node_lost" in plus
    words = {line.split(":")[0] for line in minus + plus}
    assert words <= {"name", "subdomain", "shoal.dev/restart", "completions", "parallelism",
                     "value", "- name", "- value"}, changed


def test_the_capacity_probe_asks_for_one_node_of_the_shrunk_start_and_nothing_more() -> None:
    """The probe beside the shrunk start (`golden/elastic_probe.yaml`): the gang's queue, one
    pod with a node's image, requests, limits and placement, and none of what runs the task
    (no contract variables, volumes, store secret): it holds quota, it does no work."""
    shrunk, probe = (elastic_manifests()[k][0] for k in ("elastic_shrunk", "elastic_probe"))
    node = shrunk["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod = probe["spec"]["template"]["spec"]
    assert probe["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == \
        shrunk["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert probe["metadata"]["labels"]["shoal.dev/probe-of"] == shrunk["metadata"]["name"]
    assert probe["spec"]["suspend"] is True
    assert (probe["spec"]["parallelism"], probe["spec"]["completions"]) == (1, 1)
    for key in ("nodeSelector", "tolerations"):
        assert pod[key] == node[key]
    (container,) = pod["containers"]
    assert container["image"] == node["containers"][0]["image"]
    assert container["resources"] == node["containers"][0]["resources"]
    assert set(container) == {"name", "image", "command", "resources"}
    assert "volumes" not in pod and pod["restartPolicy"] == "Never"
