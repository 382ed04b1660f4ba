"""A big gang in the browser: the run page draws its grid a page of nodes at a time, with every
state counted over all ranks, and the metrics page draws a band of downsampled points, not a
line per rank. The run is written by the scale benchmark's generator (a real gang of 65
nodes cannot run here); tests/unit/test_scale_generator.py checks its files against a real
gang's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import benchmark_module

from .conftest import Server, screenshots_dir

pytestmark = [pytest.mark.slow, pytest.mark.ui]


def _generator() -> Any:
    return benchmark_module("_scale_generator")


def test_a_gang_of_65_nodes_is_paged_and_banded(ui_server: Server, page: Any,
                                                  shoal_home: Path) -> None:
    gen = _generator()
    run = gen.generate(shoal_home, gen.Shape(nodes=65, per_node=2, steps=200, metrics=1,
                                             system_interval=100, log_every=1000))
    page.goto(ui_server.url)  # the token once: the cookie carries it from here on
    page.goto(f"{ui_server.base}/runs/{run}")
    pager = page.wait_for_selector(".grid-pager[data-restart='0']")
    assert "65 nodes, 130 succeeded" in pager.inner_text()
    assert "page 1 of 2" in pager.inner_text()
    page.screenshot(path=str(screenshots_dir() / "run-gang-paged.png"), full_page=True)
    rows = ".gang table.grid[data-restart='0'] tr"
    assert len(page.query_selector_all(rows)) == 64
    assert len(page.query_selector_all(".gang table.grid td.cell")) == 64 * 2
    page.click(".grid-next")
    page.wait_for_selector(".gang td.cell[data-rank='129']")  # node 64 alone on page 2
    assert len(page.query_selector_all(rows)) == 1 and "page 2 of 2" in page.inner_text(
        ".grid-pager")
    assert page.is_disabled(".grid-next") and not page.is_disabled(".grid-prev")
    page.select_option("select.grid-page", "0")
    page.wait_for_selector(".gang td.cell[data-rank='0']")

    page.goto(f"{ui_server.base}/runs/{run}/metrics")
    page.wait_for_function("() => window.shoalCharts && window.shoalCharts['user/loss']")
    loss = page.evaluate("() => window.shoalCharts['user/loss']")
    page.screenshot(path=str(screenshots_dir() / "metrics-band.png"), full_page=True)
    assert loss["band"] and [line["label"] for line in loss["lines"]] == [
        "min of 130 ranks", "median of 130 ranks", "max of 130 ranks"]
    assert [line["points"] for line in loss["lines"]] == [200, 200, 200]  # a bucket per step
