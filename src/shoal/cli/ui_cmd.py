"""`shoal ui [RUN] [--port P] [--host 127.0.0.1 | --host H --allow-remote [--certfile C
--keyfile K]]`: the web UI of this machine's runs.

It prints one URL with a fresh random token (``?token=...``), of the runs page or, given RUN,
of that run's page; only requests carrying the token (or the cookie the first one sets) are
answered. It listens on loopback only unless ``--allow-remote`` is given; then it serves HTTPS
with ``--certfile``/``--keyfile``, or plain HTTP with a warning. Needs the ``ui`` extra:
``pip install 'shoal[ui]'``.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    from shoal import _contract as contract

    p.add_argument("run", metavar="RUN", nargs="?", default=None,
                   help="print the URL of this run's page (a unique prefix is enough)")
    p.add_argument("--port", type=int, default=contract.DEFAULT_UI_PORT,
                   help=f"port to listen on (default {contract.DEFAULT_UI_PORT}, the port "
                   "run URLs name; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; "
                   "another needs --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host other machines can reach (plain HTTP warns: the "
                   "token travels in clear; give --certfile/--keyfile for HTTPS)")
    p.add_argument("--certfile", default=None, help="serve HTTPS with this PEM certificate")
    p.add_argument("--keyfile", default=None, help="the private key of --certfile (PEM)")


def execute(args: argparse.Namespace, rest: list[str]) -> int:
    from shoal import _contract as contract
    from shoal.errors import SpecError

    if not 0 <= args.port <= 65535:
        raise SpecError("--port", args.port, "is not a TCP port", "pass 0..65535, e.g. 8484")
    try:
        from shoal._ui.server import check_listen, serve
    except ImportError as e:
        print(f"shoal: error: the web UI needs starlette and uvicorn ({e}). Fix: pip install "
              "'shoal[ui]'", file=sys.stderr)
        return 2
    tls, warning = check_listen(args.host, allow_remote=args.allow_remote,
                                certfile=args.certfile, keyfile=args.keyfile)
    page = "/"
    if args.run is not None:
        from shoal._storage.records import Records

        page = f"/runs/{Records(contract.home() / 'shoal.db').get_run(args.run).name}"
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)

    def announce(url: str) -> None:
        url = url.replace("/?token=", f"{page}?token=", 1)
        print(f"shoal ui: open {url}", flush=True)
        print("(Ctrl-C stops it)", flush=True)

    serve(contract.home(), args.host, args.port, announce, tls=tls)
    return 0
