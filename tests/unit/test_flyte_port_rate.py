"""The port-rate benchmark's pure parts: the import rename (nothing but Flyte's imports may
change, or the figure measures something else), the error line it reports and its category."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.helpers import benchmark_module


@pytest.fixture(scope="module")
def port() -> ModuleType:
    return benchmark_module("flyte_port_rate")


def test_only_flyte_and_flyteplugins_imports_are_renamed(port: ModuleType) -> None:
    source = (
        "import flyte\n"
        "import flyte.errors\n"
        "import flyte.report  # tabs\n"
        "import flyte as fl\n"
        "from flyte.io import File, Dir\n"
        "from flyte import Cache\n"
        "from flyte.clustered import (\n"
        "    TorchRun,\n"
        ")\n"
        "def f():\n"
        "    import flyte.io\n"
        "import flytekit\n"
        "from flyteplugins.x import y\n"
        's = "import flyte"\n'
        "x = flyte.map(f, [1])\r\n"
    )
    renamed, changed = port.rename_imports(source)
    assert renamed == (
        "import shoal as flyte\n"
        "import shoal as flyte, shoal.errors\n"
        "import shoal as flyte, shoal.report  # tabs\n"
        "import shoal as fl\n"
        "from shoal.io import File, Dir\n"
        "from shoal import Cache\n"
        "from shoal.clustered import (\n"
        "    TorchRun,\n"
        ")\n"
        "def f():\n"
        "    import shoal as flyte, shoal.io\n"
        "import flytekit\n"
        "from shoal.plugins.x import y\n"
        's = "import flyte"\n'
        "x = flyte.map(f, [1])\r\n"
    )
    assert changed == 9  # flyteplugins.x is shoal.plugins.x


def test_the_error_is_the_exception_that_ended_the_script(port: ModuleType) -> None:
    stderr = (
        "some log line\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n'
        "KeyError: 'x'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in <module>\n'
        "    flyte.init_from_config()\n"
        "AttributeError: module 'shoal' has no attribute 'init_from_config'\n"
    )
    error = port.first_error(stderr)
    assert error == "AttributeError: module 'shoal' has no attribute 'init_from_config'"
    assert port.categorize(error, stderr) == "missing API flyte.init_from_config"


@pytest.mark.parametrize(("error", "why"), [
    ("ModuleNotFoundError: No module named 'lightning'", "needs package lightning"),
    ("ModuleNotFoundError: No module named 'shoal._image'", "Flyte-private module flyte._image"),
    ("ModuleNotFoundError: No module named 'shoal.report'", "missing module flyte.report"),
    ("ModuleNotFoundError: No module named 'shoal.plugins.spark'",
     "missing module flyteplugins.spark"),
    ("ImportError: cannot import name 'DataFrame' from 'shoal.io' (x.py)",
     "missing API flyte.io.DataFrame"),
    ("AttributeError: type object 'Image' has no attribute 'from_uv_script'",
     "missing API Image.from_uv_script"),
    ("TypeError: TaskEnvironment.task() got an unexpected keyword argument 'entrypoint'",
     "missing argument entrypoint="),
    ("shoal.errors.SpecError: gpu='A100 80G:8': the accelerator name must be ...",
     "spec refused: gpu="),
    ("shoal.errors.UnsupportedTypeError: parameter 'x' of task 'a.b'=<class 'X'>: X cannot be "
     "passed between tasks", "type refused"),
    ("AssertionError: no CUDA device visible — is this running on a GPU node?", "needs GPU"),
    ("RuntimeError: Distributed package doesn't have NCCL built in", "needs GPU"),
])
def test_categories(port: ModuleType, error: str, why: str) -> None:
    assert port.categorize(error, "") == why


def test_main_block_notes_ignore_commented_alternatives(port: ModuleType) -> None:
    source = (
        "import flyte\n"
        'if __name__ == "__main__":\n'
        "    flyte.init_from_config(log_level=10)\n"
        '    # run = flyte.with_runcontext(mode="local").run(main)\n'
        '    run = flyte.with_runcontext(mode="remote").run(main)\n'
        "    print(run.outputs()[0])\n"
    )
    assert port.main_block_notes(source) == \
        "mode='remote', init_from_config(log_level=), outputs()[i], no wait"
    assert port.starts_a_run(source)
    assert not port.starts_a_run('if __name__ == "__main__":\n    print(task(x=1))\n')


def test_the_static_scan_reads_code_not_docs(port: ModuleType) -> None:
    source = (
        '"""Uses `flyte.Checkpoint` in prose only."""\n'
        "import flyte\n"
        "from flyte.io import File, Dir\n"
        "# flyte.commented_out()\n"
        "env = flyte.TaskEnvironment('x', resources=flyte.Resources(cpu=1))\n"
        "out = flyte.map.aio(f, [1])\n"
    )
    assert port.names_used(source) == [
        "Resources", "TaskEnvironment", "io.Dir", "io.File", "map.aio"]
    assert port.missing_in_shoal(["TaskEnvironment", "Resources.nothing_here", "no_such_name"]) \
        == ["Resources.nothing_here", "no_such_name"]
    # a name Shoal refuses when looked up (flyte.storage's backend classes) is missing too
    assert port.missing_in_shoal(["storage.S3", "storage.get", "extras.Sleep"]) == ["storage.S3"]
