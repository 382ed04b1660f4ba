"""`shoal ui [--port P] [--host 127.0.0.1]`: the web UI of this machine's runs.

It prints one URL with a fresh random token (``?token=...``); only requests carrying it (or
the cookie the first one sets) are answered. Needs the ``ui`` extra: ``pip install
'shoal[ui]'``.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shoal._runtime import contract

    p.add_argument("--port", type=int, default=contract.DEFAULT_UI_PORT,
                   help=f"port to listen on (default {contract.DEFAULT_UI_PORT}, the port "
                   "run URLs name; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal._runtime import contract
    from shoal.errors import SpecError

    if not 0 <= args.port <= 65535:
        raise SpecError("--port", args.port, "is not a TCP port", "pass 0..65535, e.g. 8484")
    try:
        from shoal._ui.server import serve
    except ImportError as e:
        print(f"shoal: error: the web UI needs starlette and uvicorn ({e}). Fix: pip install "
              "'shoal[ui]'", file=sys.stderr)
        return 2

    def announce(url: str) -> None:
        print(f"shoal ui: open {url}", flush=True)
        print("(Ctrl-C stops it)", flush=True)

    serve(contract.home(), args.host, args.port, announce)
    return 0
