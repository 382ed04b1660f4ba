"""The routes of `shoal ui`: pages, their JSON, log streams, and the two buttons that act.

Only ``POST /api/runs/<run>/cancel`` and ``.../preempt`` change anything, through the flow of
`shoal cancel` and `shoal preempt` (`shoal._driver.stop_requests`): a request in the records,
or for a run driven elsewhere (Kubernetes) in its store folder, whose published records the
pages merge in before they read them.
"""

from __future__ import annotations

import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from shoal._driver import stop_requests
from shoal._driver.stop_requests import Kind
from shoal._spec.names import check_action_id, check_run_name
from shoal._storage.logs import LogSource
from shoal._storage.records import Records, RunRecord, refresh
from shoal._ui import gang_view, logs_view, pages, views
from shoal._ui.guard import Guard
from shoal._ui.headers import SecurityHeaders
from shoal._ui.metrics_view import MetricsCache
from shoal.errors import NotFoundError, SpecError, StoreError

STATIC = Path(__file__).parent / "static"
REAP_SECONDS = 5.0


class _Missing(Exception):
    status = 404

    def __init__(self, what: str, message: str) -> None:
        super().__init__(message)
        self.what = what
        self.message = message


class _Refused(_Missing):
    """A run name or action id in the address that breaks its rule (`shoal._spec.names`)."""

    status = 400


class UI:
    """What the routes share: the records, the home folder, the metrics cache."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.records = Records(home / "shoal.db")
        self.metrics = MetricsCache(home)
        self._reaped = 0.0

    def run(self, request: Request, *, exact: bool = False) -> RunRecord:
        """The run the address names: a unique prefix is enough to read it; what acts on a
        run (``exact``) takes its whole name, so a guess never cancels another run."""
        name = request.path_params["run"]
        try:
            check_run_name("run", name)
            return self.records.get_run(name, prefix=not exact)
        except SpecError as e:
            raise _Refused(f"run {name!r}", str(e)) from None
        except NotFoundError as e:
            raise _Missing(f"run {name}", str(e)) from None

    def reap(self) -> None:
        if time.monotonic() - self._reaped > REAP_SECONDS:
            self._reaped = time.monotonic()
            self.records.reap_dead_runs()
            for run in self.records.list_runs(state="running") + self.records.list_runs(
                    state="queued"):
                try:  # a run driven elsewhere: its state, as its driver published it
                    refresh(self.records, run, home=self.home)
                except StoreError:
                    continue  # its own page says why; the list shows what this machine has

    def fresh(self, run: RunRecord, *, logs: bool = False) -> RunRecord | JSONResponse:
        """``run`` with what its driver elsewhere published merged in, or the error saying
        its store cannot be read from here."""
        try:
            return refresh(self.records, run, home=self.home, full=True, logs=logs)
        except StoreError as e:
            return JSONResponse({"error": str(e)}, status_code=503)

    # -- pages ------------------------------------------------------------------------------
    def runs_page(self, request: Request) -> Response:
        return HTMLResponse(pages.runs_page())

    def run_page(self, request: Request) -> Response:
        return HTMLResponse(pages.run_page(self.run(request).name))

    def logs_page(self, request: Request) -> Response:
        return HTMLResponse(pages.logs_page(self.run(request).name))

    def metrics_page(self, request: Request) -> Response:
        return HTMLResponse(pages.metrics_page(self.run(request).name))

    # -- JSON -------------------------------------------------------------------------------
    def runs_api(self, request: Request) -> Response:
        self.reap()
        return JSONResponse(views.runs_json(self.records))

    def run_api(self, request: Request) -> Response:
        run = self.fresh(self.run(request))
        if isinstance(run, JSONResponse):
            return run
        return JSONResponse(views.run_json(self.records, run))

    def gang_api(self, request: Request) -> Response:
        run = self.run(request)
        action = request.path_params["action"]
        try:
            check_action_id("action", action)
        except SpecError as e:
            raise _Refused(f"action {action!r}", str(e)) from None
        if self.records.find_action(run.name, action) is None:
            raise _Missing(f"action {action}", f"run {run.name} has no action {action!r}")
        return JSONResponse(gang_view.gang_json(self.records, self.home, run, action))

    def metrics_api(self, request: Request) -> Response:
        run = self.run(request)
        x = request.query_params.get("x", "step")
        if x not in ("step", "time"):
            return JSONResponse({"error": f"x={x!r}: use step or time"}, status_code=400)
        return Response(self.metrics.answer(run.name, x), media_type="application/json")

    def profiles_api(self, request: Request) -> Response:
        """The run's profiled windows with their summaries (`shoal profile RUN`'s data)."""
        from shoal._storage import profile_files

        run = self.run(request)
        out = []
        for w in profile_files.windows(self.home, run.name):
            try:
                summary = profile_files.window_summary(w, keep=False)
            except (OSError, ValueError) as e:  # a trace still being written, or damaged
                summary = {"error": f"{type(e).__name__}: {e}"}
            out.append({"action": w.action, "attempt": w.attempt, "restart": w.restart,
                        "window": w.window, "folder": str(w.folder), "summary": summary,
                        "files": [p.name for p in w.other_files()]})
        return JSONResponse({"windows": out})

    def logs_api(self, request: Request) -> Response:
        run = self.fresh(self.run(request), logs=True)
        if isinstance(run, JSONResponse):
            return run
        return JSONResponse({"sources": logs_view.sources_json(self.home, self.records,
                                                               run.name)})

    def _source(self, request: Request) -> LogSource:
        run = self.run(request)
        key = request.path_params["key"]
        source = logs_view.find_source(self.home, self.records, run.name, key)
        if source is None:
            raise _Missing(f"log {key}", f"run {run.name} has no log {key!r}")
        return source

    async def log_stream(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        source = await run_in_threadpool(self._source, request)
        follow = request.query_params.get("follow", "1") != "0"
        return StreamingResponse(logs_view.tail_events(request, source.path, follow),
                                 media_type="text/event-stream",
                                 headers={"cache-control": "no-cache"})

    def log_download(self, request: Request) -> Response:
        source = self._source(request)
        name = f"{self.run(request).name}.{request.path_params['key']}.log"
        if not source.path.exists():
            if source.kind == "task":
                # A plain call gets its file only once it prints or runs 50 ms
                # (`_runtime/worker.CallOutput`): until then, and for a silent call, it is empty.
                return Response(b"", media_type="text/plain", headers={
                    "content-disposition": f'attachment; filename="{name}"'})
            raise _Missing(f"log {request.path_params['key']}", f"{source.path} is not written "
                           "yet")
        return FileResponse(source.path, media_type="text/plain", filename=name)

    # -- the two that act -------------------------------------------------------------------
    def _ask(self, request: Request, kind: Kind, done: str) -> Response:
        """Ask the run's driver (`shoal._driver.stop_requests`, as `shoal cancel` and `shoal
        preempt` do); ``done`` is what the answer says when it was asked of a driver here."""
        run = self.run(request, exact=True)
        try:
            asked = stop_requests.ask(self.records, run, kind, by="the web UI", home=self.home)
        except StoreError as e:
            return JSONResponse({"error": str(e)}, status_code=503)
        if not asked.requested:
            message = f"already ended ({asked.run.state})"
        elif asked.where is not None:
            message = (f"{kind} requested; its driver on {run.engine} reads it within a second "
                       f"or two (if its pod is gone, `shoal cancel {run.name}` deletes its Job)")
        else:
            message = done
        return JSONResponse({"run": run.name, "requested": asked.requested,
                             "message": message})

    def cancel_api(self, request: Request) -> Response:
        return self._ask(request, "cancel", "cancel requested")

    def preempt_api(self, request: Request) -> Response:
        return self._ask(request, "preempt", "preemption requested")


def _missing(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, _Missing)
    if request.url.path.startswith("/api/"):
        key = "missing" if exc.status == 404 else "refused"
        return JSONResponse({"error": exc.message, key: exc.what}, status_code=exc.status)
    heading = "Not found" if exc.status == 404 else "Refused"
    return HTMLResponse(pages.not_found_page(exc.what, exc.message, heading),
                        status_code=exc.status)


def build_app(home: Path, *, token: str, hosts: frozenset[str], port: int,
              scheme: str = "http") -> ASGIApp:
    ui = UI(home)
    routes = [
        Route("/", ui.runs_page),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/runs/{run}", ui.run_page),
        Route("/runs/{run}/logs", ui.logs_page),
        Route("/runs/{run}/metrics", ui.metrics_page),
        Route("/api/runs", ui.runs_api),
        Route("/api/runs/{run}", ui.run_api),
        Route("/api/runs/{run}/gangs/{action}", ui.gang_api),
        Route("/api/runs/{run}/metrics", ui.metrics_api),
        Route("/api/runs/{run}/profiles", ui.profiles_api),
        Route("/api/runs/{run}/logs", ui.logs_api),
        Route("/api/runs/{run}/logs/{key}/stream", ui.log_stream),
        Route("/api/runs/{run}/logs/{key}/download", ui.log_download),
        Route("/api/runs/{run}/cancel", ui.cancel_api, methods=["POST"]),
        Route("/api/runs/{run}/preempt", ui.preempt_api, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={_Missing: _missing})
    # The headers outermost: the guard's refusals carry them too.
    return SecurityHeaders(Guard(app, token=token, hosts=hosts, port=port, scheme=scheme))
