"""`shoal ui` in a real browser (chromium driven by Playwright) over real runs."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import shoal
from shoal import _contract as contract
from shoal._runtime.observe.metrics import MetricsWriter, metrics_path
from shoal._storage.records import Records
from tests.raycluster_records import ray_run

from .conftest import Server, screenshots_dir
from .elastic import elastic_run
from .programs import metrics_gang

pytestmark = [pytest.mark.slow, pytest.mark.ui]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as res:
            return int(res.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_gang_run_in_the_browser(ui_server: Server, page: Any, shoal_home: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2×2 gang logging metrics, one rank killed once: every rank's points are charted (and
    the engine's samples of each rank beside them), rank 3's log shows, the gang panel shows
    the restart and the checkpoints; no token, no answer."""
    monkeypatch.setenv(contract.SYSTEM_METRICS_INTERVAL, "0.3")
    run = shoal.run(metrics_gang.train, 30, 4)
    assert run.outputs()[0] > 0
    shots = screenshots_dir()

    assert _status(f"{ui_server.base}/runs/{run.name}") == 401
    assert _status(f"{ui_server.base}/api/runs/{run.name}?token=wrong") == 403

    page.goto(ui_server.url)  # the token once: the cookie carries it from here on
    page.wait_for_selector(f"tr[data-run='{run.name}']")
    page.screenshot(path=str(shots / "runs.png"), full_page=True)

    page.goto(f"{ui_server.base}/runs/{run.name}")
    grid = page.wait_for_selector(".gang table.grid[data-restart='0']")
    assert grid is not None
    assert "restarted" in page.inner_text(".gang table.grid[data-restart='0'] caption")
    killed = page.inner_text(".gang table.grid[data-restart='0'] td[data-rank='1']")
    assert "killed" in killed, killed
    assert "succeeded" in page.inner_text(".gang table.grid[data-restart='1'] caption")
    assert "rank 1" in page.inner_text(".gang .first-failure")
    assert "gang_restart" in page.inner_text(".gang .gang-events")
    rows = page.query_selector_all(".gang table.checkpoints tr")[1:]
    written = [[td.inner_text() for td in row.query_selector_all("td")] for row in rows]
    assert [w[1] for w in written] == ["0", "10", "20"], written
    assert [w[4] for w in written] == ["attempt 0 restart 0", "attempt 0 restart 1",
                                       "attempt 0 restart 1"], written
    page.screenshot(path=str(shots / "run-gang.png"), full_page=True)

    page.goto(f"{ui_server.base}/runs/{run.name}/metrics")
    page.wait_for_function("() => window.shoalCharts && window.shoalCharts['user/loss']")
    loss = page.evaluate("() => window.shoalCharts['user/loss']")
    by_rank = {line["rank"]: line["points"] for line in loss["lines"]}
    assert sorted(by_rank) == [0, 1, 2, 3], loss
    # The restart resumed after the step-0 checkpoint: steps 1..29 at least (the first start's
    # points are there too if its writers flushed before the gang was stopped).
    assert all(n >= 29 for n in by_rank.values()), by_rank
    system = page.evaluate("() => Object.values(window.shoalCharts)"
                           ".filter(c => c.source === 'system')")
    assert system, "no system metrics charted"
    assert {line["rank"] for line in system[0]["lines"]} == {0, 1, 2, 3}, system[0]
    page.wait_for_selector("[data-chart='user/loss'] canvas")
    page.screenshot(path=str(shots / "metrics.png"), full_page=True)

    page.goto(f"{ui_server.base}/runs/{run.name}/logs?source=a0.0.r1.rank3")
    page.wait_for_function("() => document.getElementById('log').textContent"
                           ".includes('rank 3 step 29')")
    page.fill("#search", "step 7 ")
    assert page.inner_text("#log").strip() == "rank 3 step 7 loss 0.5266"
    page.screenshot(path=str(shots / "logs.png"), full_page=True)


def test_live_points_and_log_lines_show_within_seconds(ui_server: Server, page: Any,
                                                       shoal_home: Path) -> None:
    """A point appended while the page is open is charted within 2 s, a log line within 1 s."""
    records = Records(shoal_home / "shoal.db")
    run = records.create_run(task="live.task", code_file="x.py", engine="local",
                             store=(shoal_home / "store").as_uri(), inputs={})
    records.create_action(run=run.name, action_id="a0", task="live.task", env="e", inputs={})
    log = shoal_home / "runs" / run.name / "logs" / "a0.0.log"
    log.parent.mkdir(parents=True)
    log.write_text("first line\n")
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=str(log))
    writer = MetricsWriter(metrics_path(shoal_home, run.name, "a0", 0),
                           {"run": run.name, "action": "a0", "attempt": 0, "source": "user"})
    writer.add([("loss", 1.0)], 0, time.time())
    writer.flush()

    page.goto(f"{ui_server.url}")
    page.goto(f"{ui_server.base}/runs/{run.name}/metrics")
    page.wait_for_function("() => window.shoalCharts && window.shoalCharts['user/loss']")
    t0 = time.monotonic()
    writer.add([("loss", 0.5)], 1, time.time())
    writer.flush()
    page.wait_for_function("() => window.shoalCharts['user/loss'].lines[0].points === 2",
                           timeout=2000)
    metric_latency = time.monotonic() - t0

    page.goto(f"{ui_server.base}/runs/{run.name}/logs")
    page.wait_for_function("() => document.getElementById('log').textContent"
                           ".includes('first line')")
    t0 = time.monotonic()
    with log.open("a") as f:
        f.write("a line written just now\n" + "x" * 100_000 + "\n")
    page.wait_for_function("() => document.getElementById('log').textContent"
                           ".includes('a line written just now')", timeout=1000)
    log_latency = time.monotonic() - t0
    shown = page.inner_text("#log")
    assert "[cut: 96000 more characters here" in shown  # the huge line, cut in the view
    assert log.read_text().count("x") == 100_000  # and whole on disk
    writer.close()

    page.goto(f"{ui_server.base}/runs/{run.name}")  # the button POSTs from the page
    page.click("#cancel")
    page.wait_for_function("() => document.getElementById('control-result').textContent"
                           " === 'cancel requested'")
    assert records.cancel_requested(run.name)
    print(f"\nmetric point -> chart {metric_latency * 1000:.0f} ms; "
          f"log line -> browser {log_latency * 1000:.0f} ms")


def test_an_elastic_gangs_starts_in_the_browser(ui_server: Server, page: Any,
                                                shoal_home: Path) -> None:
    """A gang that went 2 → 1 → 2 nodes: the starts table shows each start's nodes, world size,
    cause and resize, and the world-size chart steps 4 → 2 → 4."""
    run = elastic_run(Records(shoal_home / "shoal.db"), shoal_home)
    page.goto(ui_server.url)
    page.goto(f"{ui_server.base}/runs/{run.name}")
    page.wait_for_selector(".gang table.starts tr[data-restart='2']")
    rows = page.query_selector_all(".gang table.starts tr[data-restart]")
    shown = [[td.inner_text() for td in row.query_selector_all("td")] for row in rows]
    assert [[r[0], r[2], r[3], r[4], r[5]] for r in shown] == [
        ["r0", "2 × 2", "4", "first start", ""],
        ["r1", "1 × 2", "2", "node lost", "2 → 1: node 1 lost (its launcher exited, -9)"],
        ["r2", "2 × 2", "4", "grown", "1 → 2: node 1 is back"]], shown
    assert all(r[1] for r in shown), shown  # started at
    assert "(elastic)" in page.inner_text(".gang table.starts caption")
    chart = page.get_attribute(".gang svg.world-chart", "aria-label")
    assert chart == "world size over time: 4 → 2 → 4", chart
    steps = page.get_attribute(".gang svg.world-chart path.world-line", "d")
    assert steps is not None and steps.count("V") == 2, steps
    assert "gang_resized" in page.inner_text(".gang .gang-events")
    # each start's grid has that start's nodes
    assert len(page.query_selector_all(".gang table.grid[data-restart='1'] tr")) == 1
    page.screenshot(path=str(screenshots_dir() / "run-elastic-gang.png"), full_page=True)


class _Dashboard(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<title>Ray Dashboard</title>a stand-in dashboard"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_ray_calls_dashboard_link_and_nodes_in_the_browser(ui_server: Server, page: Any,
                                                             shoal_home: Path) -> None:
    """A running Ray call's gang panel links its dashboard (a stand-in HTTP server here: the
    link, not Ray, is under test), opening it in a new tab, and names each node's group; a
    recorded URL that is not http(s) is shown as none, not linked."""
    records = Records(shoal_home / "shoal.db")
    dashboard = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    serving = threading.Thread(target=dashboard.serve_forever, daemon=True)
    serving.start()
    try:
        url = f"http://127.0.0.1:{dashboard.server_address[1]}/"
        run = ray_run(records, shoal_home, state="running", dashboard_url=url)
        bad = ray_run(records, shoal_home, state="running", dashboard_url="javascript:alert(1)")
        page.goto(ui_server.url)
        page.goto(f"{ui_server.base}/runs/{run.name}")
        link = page.wait_for_selector(".gang .ray-cluster a.ray-dashboard")
        assert link is not None and link.inner_text() == "Ray dashboard"
        assert (link.get_attribute("href"), link.get_attribute("target")) == (url, "_blank")
        assert set((link.get_attribute("rel") or "").split()) == {"noopener", "noreferrer"}
        groups = [td.inner_text() for td in page.query_selector_all(
            ".gang .ray-cluster table.ray-nodes td.group")]
        assert groups == ["head", "workers"], groups
        heads = [th.inner_text() for th in page.query_selector_all(
            ".gang table.grid[data-restart='0'] th")]
        assert heads == ["node 0 (head)", "node 1 (workers)"], heads
        page.screenshot(path=str(screenshots_dir() / "run-ray.png"), full_page=True)
        with page.context.expect_page() as opened:
            # (by selector: the panel is redrawn each second, a held element goes stale)
            page.click(".gang .ray-cluster a.ray-dashboard")
        tab = opened.value
        tab.wait_for_load_state()
        assert tab.url == url and "stand-in dashboard" in tab.inner_text("body")
        assert tab.evaluate("() => window.opener") is None
        tab.close()

        page.goto(f"{ui_server.base}/runs/{bad.name}")
        page.wait_for_selector(".gang .ray-cluster .ray-dashboard-none")
        assert page.query_selector("a.ray-dashboard") is None
        assert "javascript" not in page.inner_html(".gang")
    finally:
        dashboard.shutdown()
        dashboard.server_close()
        serving.join(5)
