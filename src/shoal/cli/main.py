"""`shoal`: the entry point. Parses the verb, runs it, turns errors into one clear message.

Each verb lives in its own module and is imported only when used, so ``shoal runs`` does not
pay for what ``shoal run`` needs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from shoal import _contract as contract
from shoal.cli.parser import OneLineParser, UsageError, help_hint

VERBS = {
    "run": "run a task: shoal run FILE TASK [--arg value ...]",
    "runs": "list recent runs",
    "logs": "print a run's logs, a gang's ranks labelled: shoal logs RUN [--follow] [--grep RE]",
    "metrics": "the metrics a run's tasks logged, per rank: shoal metrics RUN [--csv]",
    "profile": "where profiled steps' time went, per rank: shoal profile RUN [--action A]",
    "report": "save a task's HTML report: shoal report RUN [--action A] [--out FILE]",
    "cancel": "cancel a running run",
    "preempt": "preempt the running gangs of a run (they requeue and resume)",
    "queue": "who holds this machine's CPUs, memory and GPUs, and who waits",
    "ui": "serve the web UI on loopback: shoal ui [--port P] [--host 127.0.0.1]",
    "deploy": "validate every environment of a file and render its images",
    "image": "images: shoal image build FILE [--builder B], shoal image base [--python X.Y]",
}

# The arguments of each verb that name a run, by their attribute and how the user spells them:
# each becomes a folder, a store prefix or a job name, so a bad one stops at the parse (exit 2).
# A read's unique prefix is a prefix of a valid name, so it passes the same rule.
RUN_ARGUMENTS = {"run": ("name", "resume"), "queue": ("run",)}
_FLAGS = {"name": "--name", "resume": "--resume", "run": "RUN"}


def check_run_arguments(args: argparse.Namespace) -> None:
    from shoal._spec.names import check_run_name

    for attr in RUN_ARGUMENTS.get(args.verb, ("run",)):
        value = getattr(args, attr, None)
        if value is not None:
            field = "--run" if args.verb == "queue" else _FLAGS[attr]
            check_run_name(f"shoal {args.verb} {field}", value)


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: `--n 100` must reach the task's --n, not shoal's --name.
    parser = OneLineParser(
        prog="shoal", description="Run ML pipelines on the local engine or Kubernetes.",
        allow_abbrev=False)
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks for errors")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, help_text in VERBS.items():
        module = importlib.import_module(f"shoal.cli.{verb}_cmd")
        module.add_arguments(sub.add_parser(verb, help=help_text, description=help_text,
                                            allow_abbrev=False))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from shoal.errors import ShoalError, ShoalSystemError, UserError

    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(args_list)
        if args.verb is None and rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    if args.verb is None:
        parser.print_help()
        return 2
    if args.debug:  # task processes inherit it: their tracebacks keep Shoal's frames too
        os.environ[contract.DEBUG] = "1"
    try:
        if rest and args.verb != "run":
            raise UsageError(f"shoal {args.verb}: error: unrecognized arguments: "
                             f"{' '.join(rest)}. "
                             f"Fix: {help_hint(f'shoal {args.verb}')}")
        check_run_arguments(args)
        module = importlib.import_module(f"shoal.cli.{args.verb}_cmd")
        code: int = module.execute(args, rest)
        return code
    except KeyboardInterrupt:
        print("shoal: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `shoal metrics RUN --csv | head`: the reader had enough
        # Python flushes stdout again at exit; let that go nowhere instead of failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ShoalError, FileNotFoundError) as e:
        if args.debug:
            traceback.print_exc()
        # A path the user gave that is not there is theirs to fix; a store's missing object
        # (also a FileNotFoundError) is a system failure.
        user = isinstance(e, UserError) or (isinstance(e, FileNotFoundError)
                                            and not isinstance(e, ShoalSystemError))
        print(e if isinstance(e, UsageError) else f"shoal: {'error' if user else 'failed'}: {e}",
              file=sys.stderr)
        if not args.debug and not user:  # a user error says its fix; a system one may not
            print("(run with `shoal --debug ...` for the Python traceback)", file=sys.stderr)
        return 2 if user else 1


if __name__ == "__main__":
    sys.exit(main())
