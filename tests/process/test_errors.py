"""What a user reads when something goes wrong, as `shoal run` prints it on stderr.

Each test runs the CLI as a user types it (a subprocess, real workers and ranks) and compares
the whole of stderr with what is promised, after replacing what changes between runs (run
names, times, paths): the user's traceback once and only their frames, a wrong type in one
line, a syntax error as file:line with a caret, `.aio()` named for a sync task awaited in an
async one, one line and a fix for a bad command line; exit status 2 for usage errors, 1 for a
failed run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .programs import errors

pytestmark = pytest.mark.slow

PROG = errors.__file__


def shoal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def screen(text: str) -> str:
    """stderr with what changes between runs replaced: run names, times, paths."""
    text = re.sub(r"r-\d{8}-\d{6}-[0-9a-f]{4}", "RUN", text.replace(PROG, "PROG"))
    text = re.sub(r"\(store file://\S+\)", "(store STORE)", text)
    text = re.sub(r"master port \d+", "master port P", text)
    lines = []
    for line in text.splitlines():
        line = re.sub(r"^ *\d+\.\d\ds ", "T ", line)
        line = re.sub(r"\d+\.\d\ds", "Ns", line)
        if re.match(r"  (task|[a-z_]+\.[a-z_]+)  ", line):  # a row of the summary's table
            line = re.sub(r"(?<=\S) {2,}", " ", line)
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


SEE = "shoal: logs: shoal logs RUN; metrics: shoal metrics RUN; web UI: shoal ui RUN\n"

RAISES_TRACEBACK = """\
  File "PROG", line 27, in raises
    return divide(n)
           ^^^^^^^^^
  File "PROG", line 21, in divide
    return 10 // n
           ~~~^^~~
ZeroDivisionError: integer division or modulo by zero
"""


def _streamed(label: str, text: str) -> str:
    return "".join(f"  [{label}] {line}\n" for line in text.splitlines())


def test_a_raising_task_shows_the_users_traceback_once() -> None:
    """Streamed as the task's own output, trimmed to the user's frames; the failure's report
    does not repeat it, nor the log lines streamed above it."""
    p = shoal("run", PROG, "raises")
    assert p.returncode == 1
    assert screen(p.stderr) == (
        "shoal: run RUN of oops.raises on the local engine (store STORE)\n"
        "T ▶ oops.raises [a0]\n"
        "  [oops.raises a0] dividing 10 by 0\n"
        + _streamed("oops.raises a0", "Traceback (most recent call last):\n" + RAISES_TRACEBACK)
        + "T ✗ oops.raises [a0] failed: ZeroDivisionError: integer division or modulo by zero\n"
        "  task calls ok cached replayed failed retries task time\n"
        "  oops.raises 1 0 0 0 1 0 Ns\n"
        "shoal: run RUN failed: task 'oops.raises' (action a0, attempt 0) failed: "
        "ZeroDivisionError: integer division or modulo by zero\n" + SEE)
    assert "worker.py" not in p.stderr and "base_events.py" not in p.stderr


def test_quiet_shows_the_callees_traceback_once_under_the_call() -> None:
    """Nothing streamed: the report shows the traceback once, from the caller's call down into
    the task that raised, as Python shows a plain call, then its log without the traceback."""
    p = shoal("run", "--quiet", PROG, "calls_raises")
    assert p.returncode == 1
    assert screen(p.stderr) == (
        "shoal: run RUN of oops.calls_raises on the local engine (store STORE)\n"
        "T ▶ oops.calls_raises [a0]\n"
        "T ▶ oops.raises [a0.1]\n"
        "T ✗ oops.raises [a0.1] failed: ZeroDivisionError: integer division or modulo by zero\n"
        "T ✗ oops.calls_raises [a0] failed: a task it called failed: oops.raises "
        "(ZeroDivisionError: integer division or modulo by zero)\n"
        "  task calls ok cached replayed failed retries task time\n"
        "  oops.calls_raises 1 0 0 0 1 0 Ns\n"
        "  oops.raises 1 0 0 0 1 0 Ns\n"
        "shoal: run RUN failed: task 'oops.calls_raises' (action a0, attempt 0) failed: a task "
        "it called failed: oops.raises (ZeroDivisionError: integer division or modulo by zero)\n"
        "Traceback (most recent call last):\n"
        '  File "PROG", line 32, in calls_raises\n'
        "    return await raises.aio(n)\n"
        "           ^^^^^^^^^^^^^^^^^^^\n"
        + RAISES_TRACEBACK +
        "last lines of its log:\n"
        "  | dividing 10 by 0\n" + SEE)


def test_streamed_callee_traceback_is_not_repeated_by_its_caller() -> None:
    p = shoal("run", PROG, "calls_raises")
    assert p.returncode == 1
    assert p.stderr.count("Traceback (most recent call last):") == 1
    assert screen(p.stderr).count('  File "PROG"') == 2  # raises and divide, once each
    assert screen(p.stderr).endswith(
        "shoal: run RUN failed: task 'oops.calls_raises' (action a0, attempt 0) failed: a task "
        "it called failed: oops.raises (ZeroDivisionError: integer division or modulo by zero)\n"
        + SEE)


def test_debug_keeps_shoals_frames() -> None:
    p = shoal("--debug", "run", "--quiet", PROG, "raises")
    assert p.returncode == 1
    assert "_runtime/worker.py" in p.stderr and 'PROG", line 27, in raises' in screen(p.stderr)


def test_a_wrong_output_type_is_one_line() -> None:
    p = shoal("run", PROG, "wrong_output")
    assert p.returncode == 1
    line = ("InputError: output of task 'oops.wrong_output'='seven': expected int, got str. "
            "Fix: pass an int, or change the type hint")
    assert screen(p.stderr) == (
        "shoal: run RUN of oops.wrong_output on the local engine (store STORE)\n"
        "T ▶ oops.wrong_output [a0]\n"
        f"T ✗ oops.wrong_output [a0] failed: {line}\n"
        "  task calls ok cached replayed failed retries task time\n"
        "  oops.wrong_output 1 0 0 0 1 0 Ns\n"
        f"shoal: run RUN failed: task 'oops.wrong_output' (action a0, attempt 0) failed: {line}\n"
        + SEE)


def test_a_bad_input_names_the_call_in_the_users_code_only() -> None:
    p = shoal("run", "--quiet", PROG, "passes_bad_input")
    assert p.returncode == 1
    line = ("input 'n' of task 'oops.takes_int'='x': expected int, got str. Fix: pass an int, "
            "or change the type hint")
    assert screen(p.stderr).endswith(
        f"shoal: run RUN failed: task 'oops.passes_bad_input' (action a0, attempt 0) failed: "
        f"InputError: {line}\n"
        "Traceback (most recent call last):\n"
        '  File "PROG", line 47, in passes_bad_input\n'
        '    return await takes_int.aio("x")  # type: ignore[arg-type]\n'
        "           ^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f"shoal.errors.InputError: {line}\n" + SEE)
    p = shoal("run", PROG, "takes_int", "--n", "x")  # the same mistake on the command line
    assert p.returncode == 2
    assert p.stderr == ("shoal: error: --n='x': is not a valid int (invalid literal for int() "
                        "with base 10: 'x'). Fix: pass an int, e.g. --n 4\n")


def test_sync_tasks_run_wherever_they_are_called() -> None:
    """From an async task's body (its loop waits), a thread of it (`asyncio.to_thread`), and
    a sync task's body, as Flyte 2's calls do."""
    p = shoal("run", "--quiet", PROG, "calls_sync_task")
    assert (p.returncode, p.stdout) == (0, "4\n"), p.stderr
    p = shoal("run", "--quiet", PROG, "sync_task_from_a_thread")
    assert (p.returncode, p.stdout) == (0, "4\n"), p.stderr
    p = shoal("run", "--quiet", PROG, "sync_calls_sync")
    assert (p.returncode, p.stdout) == (0, "3\n"), p.stderr


def test_a_gang_shows_the_first_failing_ranks_traceback_once() -> None:
    """Every rank raises the same way: one traceback streamed, the other ranks' folded into
    their own exception line; the report adds nothing streamed above."""
    p = shoal("run", PROG, "every_rank_raises")
    assert p.returncode == 1
    out = screen(p.stderr)
    assert out.count("Traceback (most recent call last):") == 1
    first = re.search(r"\[oopsgang.every_rank_raises a0 rank (\d)\] Traceback", out)
    assert first is not None
    for rank in {"0", "1", "2", "3"} - {first.group(1)}:
        assert (f"  [oopsgang.every_rank_raises a0 rank {rank}] ValueError: rank {rank} found a "
                f"bad shard (the same traceback as [oopsgang.every_rank_raises a0 rank "
                f"{first.group(1)}] above)\n") in out
    failed = re.search(r"\nshoal: run RUN failed: task 'oopsgang.every_rank_raises' \(action a0, "
                       r"attempt 0, rank (\d), node \d\) failed: rank \1 failed first \(restart "
                       r"0\): ValueError: rank \1 found a bad shard( \[exit code 1\])?\n"
                       + re.escape(SEE) + "$", out)
    assert failed is not None, out


def test_a_gang_quiet_shows_the_first_failing_ranks_traceback_once() -> None:
    p = shoal("run", "--quiet", PROG, "calls_the_gang")
    assert p.returncode == 1
    out = screen(p.stderr)
    assert out.count("Traceback (most recent call last):") == 1
    rank = re.search(r"rank (\d) failed first", out)
    assert rank is not None
    assert out.endswith(
        "Traceback (most recent call last):\n"
        '  File "PROG", line 79, in calls_the_gang\n'
        "    return await every_rank_raises.aio()\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "PROG", line 73, in every_rank_raises\n'
        "    check_shard(shoal.ctx().rank or 0)\n"
        '  File "PROG", line 68, in check_shard\n'
        '    raise ValueError(f"rank {rank} found a bad shard")\n'
        f"ValueError: rank {rank.group(1)} found a bad shard\n" + SEE)


def test_a_syntax_error_is_file_line_and_caret(tmp_path: Path) -> None:
    prog = tmp_path / "broken.py"
    prog.write_text("import shoal\n\nenv = shoal.TaskEnvironment(name='e')\n\n\n"
                    "@env.task\ndef t() -> int:\n    return 1 +\n")
    p = shoal("run", str(prog), "t")
    assert p.returncode == 2
    assert p.stderr == (f"shoal: error: {prog}:8: SyntaxError: invalid syntax\n"
                        "    return 1 +\n"
                        "              ^\n")


def test_an_import_error_is_file_line_and_the_fix(tmp_path: Path) -> None:
    prog = tmp_path / "needs.py"
    prog.write_text("import shoal\nimport tokenizers_of_mars\n")
    p = shoal("run", str(prog), "t")
    assert p.returncode == 2
    assert p.stderr == (
        f"shoal: error: {prog}:2: ModuleNotFoundError: No module named 'tokenizers_of_mars'\n"
        "    import tokenizers_of_mars\n"
        "Fix: install the package that provides 'tokenizers_of_mars' into the Python that runs "
        f"the task ({sys.executable}), or correct the import\n")
    prog.write_text("import shoal\n\nsteps = compute_steps(4) * 2\n")
    p = shoal("deploy", str(prog))  # another verb that imports the file
    assert p.returncode == 2
    assert p.stderr == (
        f"shoal: error: {prog}:3: NameError: name 'compute_steps' is not defined\n"
        "    steps = compute_steps(4) * 2\n"
        "            ^^^^^^^^^^^^^\n"
        "Fix: correct that line (it runs when the file is imported); `shoal --debug ...` shows "
        "the whole traceback\n")


@pytest.mark.parametrize(("argv", "line"), [
    (["run", PROG, "raises", "--m", "3"],
     "shoal run FILE raises: error: unrecognized arguments: --m 3. Fix: raises takes --n; "
     "`shoal run FILE raises --help` shows their types"),
    (["run", PROG, "takes_int"],
     "shoal run FILE takes_int: error: the following arguments are required: --n. Fix: "
     "takes_int takes --n (required); `shoal run FILE takes_int --help` shows their types"),
    (["run", PROG, "rasies"],
     "shoal: error: TASK='rasies': no such task in PROG. Fix: did you mean 'raises'?"),
    (["runs", "--all"],
     "shoal runs: error: unrecognized arguments: --all. Fix: `shoal runs --help` lists what "
     "it takes"),
    (["logs"],
     "shoal logs: error: the following arguments are required: RUN. Fix: `shoal logs --help` "
     "lists what it takes"),
    (["cancel", "r-nothing"],
     "shoal: error: no run named 'r-nothing' in HOME/shoal.db. Fix: see `shoal runs` for the "
     "recent runs"),
])
def test_every_usage_error_is_one_line_and_its_fix(argv: list[str], line: str,
                                                    shoal_home: Path) -> None:
    p = shoal(*argv)
    assert p.returncode == 2
    assert p.stderr.replace(PROG, "PROG").replace(str(shoal_home), "HOME") == line + "\n"
