"""`shoal`: the entry point. Parses the verb, runs it, turns errors into one clear message.

Each verb lives in its own module and is imported only when used, so ``shoal runs`` does not
pay for what ``shoal run`` needs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence

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
    "image": "image commands: shoal image build FILE",
}


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: `--n 100` must reach the task's --n, not shoal's --name.
    parser = argparse.ArgumentParser(
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
    from shoal.errors import ShoalError, UserError

    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(args_list)
    if args.verb is None:
        parser.print_help()
        return 2
    if rest and args.verb != "run":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    module = importlib.import_module(f"shoal.cli.{args.verb}_cmd")
    try:
        code: int = module.execute(args, rest)
        return code
    except KeyboardInterrupt:
        print("shoal: interrupted", file=sys.stderr)
        return 130
    except (ShoalError, FileNotFoundError) as e:
        if args.debug:
            traceback.print_exc()
        kind = "error" if isinstance(e, UserError | FileNotFoundError) else "failed"
        print(f"shoal: {kind}: {e}", file=sys.stderr)
        if not args.debug:
            print("(run with `shoal --debug ...` for the Python traceback)", file=sys.stderr)
        return 2 if isinstance(e, UserError) else 1


if __name__ == "__main__":
    sys.exit(main())
