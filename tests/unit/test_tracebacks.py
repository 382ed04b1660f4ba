"""Tracebacks trimmed to the user's frames, failures shown once, usage errors in one line."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

import pytest

import shoal
from shoal import _contract as contract
from shoal._runtime.loader import load_file
from shoal._runtime.tracebacks import caret_line, is_machinery, through_call, user_traceback
from shoal.cli.log_stream import LogStream
from shoal.cli.main import main
from shoal.errors import (
    FailureInfo,
    InputError,
    RuntimeUserError,
    UserCodeError,
    tail_after_traceback,
)

env = shoal.TaskEnvironment(name="tb")


def _explode(n: int) -> int:
    return 10 // n


@env.task
def task_that_divides(n: int) -> int:
    return _explode(n)


async def _driver() -> int:
    return task_that_divides(0)  # outside a run: the plain function, under Shoal's frame


def _raised(fn: object, *args: object) -> BaseException:
    try:
        fn(*args)  # type: ignore[operator]
    except BaseException as e:  # whatever it raised is what the test inspects
        return e
    raise AssertionError("did not raise")


def test_shoals_and_asyncios_frames_are_left_out() -> None:
    e = _raised(asyncio.run, _driver())
    full = user_traceback(e, full=True)
    assert "asyncio" in full and "_api/task.py" in full  # what there was to trim
    lines = user_traceback(e, full=False).splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert [line.split(", in ")[-1] for line in lines if line.startswith("  File")] == \
        ["_raised", "_driver", "task_that_divides", "_explode"]
    assert "asyncio" not in "\n".join(lines) and "_api/task.py" not in "\n".join(lines)
    assert lines[-1] == "ZeroDivisionError: integer division or modulo by zero"


def test_other_libraries_frames_and_chained_causes_stay() -> None:
    def parse() -> object:
        try:
            return json.loads("{")
        except ValueError as e:
            raise RuntimeError("the config is not JSON") from e

    text = user_traceback(_raised(parse), full=False)
    assert "json/decoder.py" in text  # a library's frames are the user's business
    assert "The above exception was the direct cause of the following exception:" in text
    assert text.rstrip().endswith("RuntimeError: the config is not JSON")


def test_debug_keeps_every_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    e = _raised(asyncio.run, _driver())
    monkeypatch.setenv(contract.DEBUG, "1")
    assert "asyncio" in user_traceback(e)
    monkeypatch.delenv(contract.DEBUG)
    assert "asyncio" not in user_traceback(e)


def test_shoals_own_error_without_user_frames_is_its_message_alone() -> None:
    from shoal._storage import codecs

    e = _raised(lambda: codecs.encode("seven", int, blobs=None, field="output"))
    assert isinstance(e, InputError)
    tb = e.__traceback__
    while tb is not None and not is_machinery(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next  # as the worker sees it: raised by Shoal after the task returned
    assert user_traceback(e.with_traceback(tb), full=False) == ""


def _failed(traceback: str, log_tail: str = "") -> RuntimeUserError:
    return RuntimeUserError(FailureInfo(task="tb.leaf", action="a0.1", attempt=0, kind="user",
                                        message="ValueError: bad", traceback=traceback,
                                        log_tail=log_tail, error_type="ValueError"))


LEAF = ('Traceback (most recent call last):\n  File "/u/leaf.py", line 3, in leaf\n'
        "    raise ValueError('bad')\nValueError: bad\n")


def test_a_callers_traceback_runs_down_into_the_callee() -> None:
    def caller() -> None:
        raise _failed(LEAF)

    e = _raised(caller)
    assert isinstance(e, RuntimeUserError)
    lines = through_call(e).splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert [line.split(", in ")[-1] for line in lines if line.startswith("  File")] == \
        ["_raised", "caller", "leaf"]
    assert lines[-3:] == ['  File "/u/leaf.py", line 3, in leaf', "    raise ValueError('bad')",
                          "ValueError: bad"]
    assert through_call(_failed("")) == ""  # neither has frames of the user's


def test_a_callee_without_a_traceback_is_named_at_the_call() -> None:
    def caller() -> None:
        raise _failed("")

    text = through_call(_raised(caller))  # type: ignore[arg-type]
    assert text.splitlines()[-1] == ("shoal.errors.RuntimeUserError: task 'tb.leaf' (action "
                                     "a0.1, attempt 0) failed: ValueError: bad")


@pytest.mark.parametrize(("tail", "left"), [
    ("loading\n" + LEAF, "loading"),  # the traceback is the log's end
    (LEAF, ""),
    ("\n".join(LEAF.splitlines()[2:]), ""),  # the tail is all inside the traceback
    ("loading\nValueError: bad", "loading\nValueError: bad"),  # a different ending: kept
    ("loading\nepoch 1", "loading\nepoch 1"),
])
def test_the_log_tail_does_not_repeat_the_traceback(tail: str, left: str) -> None:
    assert tail_after_traceback(tail, LEAF) == left


def test_a_callers_tail_is_cut_where_its_longer_traceback_begins() -> None:
    caller = LEAF.replace("Traceback (most recent call last):\n",
                          'Traceback (most recent call last):\n  File "/u/main.py", line 9, in '
                          "main\n    await leaf.aio()\n")
    assert tail_after_traceback("loading\n" + LEAF, caller) == "loading"
    error = _failed(caller, "loading\n" + LEAF)
    assert str(error) == (error.headline() + "\n" + caller.rstrip() +
                          "\nlast lines of its log:\n  | loading")


def test_caret_line_marks_the_columns() -> None:
    assert caret_line("    return 1 +\n", 14, None) == "    return 1 +\n              ^"
    assert caret_line("x = foo(1)", 4, 7) == "    x = foo(1)\n        ^^^"
    assert caret_line("x = 1", None, None) == "    x = 1"


def test_a_syntax_error_in_the_users_file(tmp_path: Path) -> None:
    prog = tmp_path / "syntax_err.py"
    prog.write_text("import shoal\n\ndef f(:\n    pass\n")
    with pytest.raises(UserCodeError) as e:
        load_file(prog)
    assert str(e.value) == f"{prog}:3: SyntaxError: invalid syntax\n    def f(:\n          ^"
    assert "syntax_err" not in sys.modules  # a fixed file is imported afresh


def test_an_exception_at_import_names_the_innermost_line_of_the_users(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("def size():\n    return {}['rows']\n")
    prog = tmp_path / "uses_helper.py"
    prog.write_text("import helper_mod\n\nROWS = helper_mod.size()\n")
    with pytest.raises(UserCodeError) as e:
        load_file(prog)
    first, line, *caret, fix = str(e.value).splitlines()
    assert first == f"{tmp_path / 'helper_mod.py'}:2: KeyError: 'rows'"
    assert line == "    return {}['rows']"
    # Columns exist from Python 3.11; before, like Python's own traceback, no caret.
    assert caret == (["           ^^^^^^^^^^"] if sys.version_info >= (3, 11) else [])
    assert fix.startswith("Fix: correct that line")
    assert isinstance(e.value.__cause__, KeyError)


def test_a_repeated_traceback_is_folded_into_its_last_line() -> None:
    out = io.StringIO()
    stream = LogStream(out)
    block = LEAF.splitlines()
    stream.lines("r0.log", "t a0 rank 0", ["hello", *block[:2]])  # cut mid-traceback
    stream.lines("r0.log", "t a0 rank 0", block[2:])
    stream.lines("r1.log", "t a0 rank 1", [*block[:-1], "ValueError: worse"])
    stream.lines("r0b.log", "t a0 rank 0", block)  # the same rank, restarted
    stream.lines("r2.log", "t a0 rank 2", block[:2])
    stream.close("r2.log", "t a0 rank 2")  # ended mid-traceback: printed as it is
    assert out.getvalue().splitlines() == [
        "  [t a0 rank 0] hello",
        *(f"  [t a0 rank 0] {line}" for line in block),
        "  [t a0 rank 1] ValueError: worse (the same traceback as [t a0 rank 0] above)",
        "  [t a0 rank 0] ValueError: bad (the same traceback as above)",
        *(f"  [t a0 rank 2] {line}" for line in block[:2]),
    ]


@pytest.mark.parametrize(("argv", "line"), [
    (["runs", "--bogus"], "shoal runs: error: unrecognized arguments: --bogus. Fix: `shoal runs "
                          "--help` lists what it takes"),
    (["--bogus"], "shoal: error: unrecognized arguments: --bogus. Fix: `shoal --help` lists "
                  "what it takes"),
    (["lgos"], "shoal: error: argument VERB: invalid choice: 'lgos' (choose from 'run', 'runs', "
               "'logs', 'metrics', 'profile', 'report', 'cancel', 'preempt', 'queue', 'ui', "
               "'deploy', 'image'). Fix: `shoal --help` lists what it takes"),
    (["image", "build"], "shoal image build: error: the following arguments are required: "
                         "FILE. Fix: `shoal image build --help` lists what it takes"),
])
def test_a_bad_command_line_is_one_line_and_its_fix(argv: list[str], line: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == line + "\n"


def test_the_report_adds_only_what_was_not_streamed(tmp_path: Path) -> None:
    from shoal.cli.progress import Progress

    def failure(traceback: str) -> RuntimeUserError:
        return RuntimeUserError(FailureInfo(task="tb.t", action="a0", attempt=0, kind="user",
                                            message="ValueError: bad", traceback=traceback,
                                            log_tail="loading\n" + traceback))

    quiet = Progress(io.StringIO(), stream_logs=False)
    quiet("started", "a0", {"task": "tb.t", "log": str(tmp_path / "a0.log")})
    assert quiet.failure_details(failure(LEAF)) == LEAF.rstrip() + \
        "\nlast lines of its log:\n  | loading"
    live = Progress(io.StringIO())
    live("started", "a0", {"task": "tb.t", "log": str(tmp_path / "a0.log")})
    assert live.failure_details(failure(LEAF)) == ""  # printed in the log streamed above
    stacks = "rank 3 (node 1): process stopped\n    _train (prog.py:45)\n"
    assert live.failure_details(failure(stacks)) == stacks.rstrip()  # in no log: shown
