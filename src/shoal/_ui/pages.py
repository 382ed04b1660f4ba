"""The HTML pages: a frame each, filled by its script from the JSON endpoints.

Server-rendered shells keep the pages usable without a build step; the scripts under
``static/`` are plain JavaScript. Every value put into HTML here is escaped.
"""

from __future__ import annotations

from html import escape

_UPLOT = ('<link rel="stylesheet" href="/static/vendor/uplot/uPlot.min.css">'
          '<script src="/static/vendor/uplot/uPlot.iife.min.js"></script>')


def _page(title: str, body: str, script: str, *, run: str = "", extra_head: str = "") -> str:
    nav = '<a href="/">runs</a>'
    if run:
        r = escape(run)
        nav += (f' › <a href="/runs/{r}">{r}</a> · <a href="/runs/{r}/logs">logs</a>'
                f' · <a href="/runs/{r}/metrics">metrics</a>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{escape(title)} · shoal</title>
<link rel="stylesheet" href="/static/app.css">{extra_head}
</head><body data-run="{escape(run)}">
<header><b>shoal</b> <nav>{nav}</nav></header>
<main>{body}</main>
<script src="/static/common.js"></script>
{f'<script src="/static/{script}"></script>' if script else ""}
</body></html>"""


def runs_page() -> str:
    body = """<h1>Runs</h1>
<input id="filter" type="search" placeholder="filter: name, task, state, engine" autofocus>
<table id="runs"><thead><tr><th>name</th><th>task</th><th>state</th><th>engine</th>
<th>started</th><th>duration</th></tr></thead><tbody></tbody></table>"""
    return _page("runs", body, "runs.js")


def run_page(run: str) -> str:
    body = f"""<h1>Run <span id="run-name">{escape(run)}</span> <span id="run-state"
class="state"></span></h1>
<p id="run-summary"></p>
<p><button id="cancel" type="button">Cancel</button>
<button id="preempt" type="button">Preempt gangs</button> <span id="control-result"></span></p>
<section><h2>Call tree</h2><div id="tree"></div></section>
<section><h2>Timeline</h2><div id="timeline"></div></section>
<section id="gangs"></section>
<section id="profiles" hidden><h2>Profiles</h2><div id="profile-windows"></div></section>
<section><h2>Action</h2><div id="detail">select an action in the tree</div></section>
<section><h2>Events</h2><ol id="events"></ol></section>"""
    return _page(f"run {run}", body, "run.js", run=run)


def logs_page(run: str) -> str:
    body = f"""<h1>Logs of {escape(run)}</h1>
<p><select id="source"></select> <input id="search" type="search" placeholder="search">
<label><input id="follow" type="checkbox" checked> follow</label>
<a id="download" href="#">download whole file</a> <span id="log-status"></span></p>
<pre id="log"></pre>"""
    return _page(f"logs {run}", body, "logs.js", run=run)


def metrics_page(run: str) -> str:
    body = f"""<h1>Metrics of {escape(run)}</h1>
<p>x: <label><input type="radio" name="x" value="step" checked> step</label>
<label><input type="radio" name="x" value="time"> time</label>
· smoothing <input id="smooth" type="range" min="0" max="0.99" step="0.01" value="0">
<span id="smooth-value">0</span> · <span id="metrics-status"></span>
· drag on a chart to zoom, double-click to reset</p>
<section><h2>Training</h2><div id="charts-user" class="charts">
<p class="empty">no points yet (tasks call shoal.log_metrics)</p></div></section>
<section><h2>System</h2><div id="charts-system" class="charts">
<p class="empty">none recorded (CPU, memory and GPUs, sampled per rank by the engine)</p>
</div></section>"""
    return _page(f"metrics {run}", body, "metrics.js", run=run, extra_head=_UPLOT)


def not_found_page(what: str, message: str, heading: str = "Not found") -> str:
    body = (f'<h1>{escape(heading)}: {escape(what)}</h1><p class="error">{escape(message)}</p>'
            '<p><a href="/">all runs</a></p>')
    return _page(heading.lower(), body, "")
