"""The command-line parser of every verb: a usage error is one line and its fix.

argparse prints the whole usage, then ``prog: error: ...`` and exits; `shoal` instead raises
`UsageError`, which `main` prints as ``PROG: error: <what>. Fix: <how>`` with exit status 2,
like every other usage error (an unknown task, a bad task argument, a bad spec).
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from shoal.errors import UserError


class UsageError(UserError):
    """A command line that cannot be parsed; ``str()`` is the one line to print, in
    argparse's shape: ``PROG: error: what. Fix: how``."""


class OneLineParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are `UsageError` naming the fix.

    ``fix`` says what to do instead; by default it points at ``PROG --help``.
    """

    def __init__(self, *args: object, fix: str | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fix = fix

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}. Fix: "
                         f"{self.fix or help_hint(self.prog)}")


def help_hint(prog: str) -> str:
    return f"`{prog} --help` lists what it takes"
