"""The rules of names (`shoal._spec.names`), by value: what each accepts, what it refuses and
what its error says (the field, the value, the rule, a fix that itself passes the rule)."""

from __future__ import annotations

import pytest

from shoal._spec import names
from shoal.errors import SpecError


@pytest.mark.parametrize("good", ["r-20261201-120000-abcd", "nightly", "a", "A.b_c-1",
                                  "9lives", "r" * 63])
def test_a_run_name(good: str) -> None:
    assert names.check_run_name("name", good) == good


@pytest.mark.parametrize("bad", ["", "/abs", "../x", "a/b", "..", "a..b", ".hidden", "-rf",
                                 "a b", "a\nb", "a\x00b", "é", "r" * 64, None, 3])
def test_not_a_run_name(bad: object) -> None:
    with pytest.raises(SpecError, match="a run name is") as info:
        names.check_run_name("--name", bad)
    err = info.value
    assert err.field == "--name" and err.value == bad and "\n" not in str(err)
    assert err.fix is not None
    suggested = err.fix.removeprefix("use ").strip("'")
    assert names.check_run_name("fix", suggested) == suggested


@pytest.mark.parametrize(("good", "bad"), [("a0.3.t1", "a0/../x"), ("a0." + "9" * 50, "a" * 201)])
def test_action_ids(good: str, bad: str) -> None:
    assert names.check_action_id("action", good) == good
    with pytest.raises(SpecError, match="an action id"):
        names.check_action_id("action", bad)


@pytest.mark.parametrize("good", ["model.pt", "shards/0.bin", "a b.txt", "ünï.csv", "x:y"])
def test_an_object_name(good: str) -> None:
    assert names.check_object_name("File.name", good) == good


@pytest.mark.parametrize(("bad", "rule"), [
    ("", "empty"), ("/x", "leading '/'"), ("../x", "'..'"), ("a/./b", "'.'"),
    ("a//b", "empty"), ("a/", "empty"), ("a\\b", "backslash"), ("a\nb", "printable"),
    ("a\x00b", "printable"), ("x" * 1025, "at most"),
])
def test_not_an_object_name(bad: str, rule: str) -> None:
    with pytest.raises(SpecError, match="relative path under its folder") as info:
        names.check_object_name("File.name", bad)
    assert rule in info.value.rule


def test_one_path_segment() -> None:
    assert names.check_path_segment("run", "r-1") == "r-1"
    for bad in ("a/b", "..", "", "a\nb"):
        with pytest.raises(SpecError):
            names.check_path_segment("run", bad)


def test_task_names_node_names_and_text() -> None:
    assert names.check_task_name("name", "train_step-2") == "train_step-2"
    assert names.check_node_name("node", "gpu-node-01.cluster") == "gpu-node-01.cluster"
    assert names.check_label_text("group", "epoch 1 · shard 3") == "epoch 1 · shard 3"
    for check, bad in ((names.check_task_name, "a.b"), (names.check_task_name, "../x"),
                       (names.check_node_name, "n\n1"), (names.check_node_name, ".."),
                       (names.check_label_text, "ok\nforged"), (names.check_label_text, " "),
                       (names.check_label_text, "x" * 201)):
        with pytest.raises(SpecError):
            check("field", bad)


def test_shown_keeps_one_value_on_one_line() -> None:
    assert names.shown("plain text, é") == "plain text, é"
    assert names.shown("a\nb\x00c\u2028d\te") == "a\\nb\\x00c\\u2028d\\te"
    assert names.shown("a\nb").isprintable()
