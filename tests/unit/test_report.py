"""`shoal.report` by value: the page, tabs, validation, sessions, warnings, where it is stored."""

from __future__ import annotations

import asyncio
import re
import warnings
from pathlib import Path

import pytest

import shoal
from shoal._api import report as report_api
from shoal._runtime.context import TaskContext, running
from shoal._runtime.observe.report_page import Report, render_page
from shoal._runtime.observe.report_scope import ReportSession, reporting
from shoal._storage.report_store import report_uri, stored_reports
from shoal._storage.store import open_store
from shoal.errors import SpecError, StoreError


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_api, "_warned", set())


def _session(pages: list[str], **kw: object) -> ReportSession:
    return ReportSession(Report("env.train"), [("run", "r-1")],
                         write=lambda page: pages.append(page.decode()), **kw)  # type: ignore[arg-type]


def _labels(page: str) -> list[str]:
    return re.findall(r'<label for="shoal-t\d+">([^<]*)</label>', page)


def test_flyte_names_are_there_in_both_import_forms() -> None:
    from shoal import report

    assert report is shoal.report
    for name in ("log", "replace", "flush", "get_tab", "current_report", "Report", "Tab"):
        assert hasattr(shoal.report, name), name
    for name in ("log", "replace", "flush"):
        assert asyncio.iscoroutinefunction(getattr(shoal.report, name).aio)


def test_tabs_render_in_order_and_an_empty_main_gets_no_tab() -> None:
    r = Report("t")
    r.get_tab("Metrics").log("<b>loss</b>")
    r.get_tab("Samples <raw>").log("<i>a</i>")
    page = render_page(r, title="t", facts=[("run", "r-<1>")], note="")
    assert _labels(page) == ["Metrics", "Samples &lt;raw&gt;"]
    assert "<b>loss</b>" in page and "<i>a</i>" in page  # content is HTML, kept as written
    assert "r-&lt;1&gt;" in page  # facts are text, escaped
    assert "#shoal-t1:checked~.panels #shoal-p1{display:block}" in page
    assert page.count(" checked>") == 1
    r.get_tab("main").log("<p>m</p>")
    assert _labels(render_page(r, title="t", facts=[], note=""))[0] == "main"


def test_a_report_with_nothing_logged_says_so_and_fetches_nothing() -> None:
    page = Report("t").get_final_report()
    assert _labels(page) == ["main"] and "Nothing was logged to this report." in page
    assert not re.search(r"https?:|<script|<link|@import|src=", page)


def test_tab_log_and_replace() -> None:
    tab = Report("t").get_tab("x")
    tab.log("<p>1</p>")
    tab.log("<p>2</p>")
    assert tab.get_html() == "<p>1</p>\n<p>2</p>"
    tab.replace("<p>3</p>")
    assert tab.content == ["<p>3</p>"]


def test_bad_input_is_refused_with_the_fix() -> None:
    r = Report("t")
    with pytest.raises(SpecError, match="must be an HTML string"):
        r.get_tab("x").log(3)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"does not exist.*\['main', 'x'\]"):
        r.get_tab("nope", create_if_missing=False)
    with pytest.raises(SpecError, match="non-empty string"):
        r.get_tab(" ")
    env = shoal.TaskEnvironment("badreport")
    with pytest.raises(SpecError, match=r"report.*must be a bool"):
        env.task(report="yes")(lambda: None)  # type: ignore[arg-type]


def test_report_flag_reaches_the_task_spec() -> None:
    env = shoal.TaskEnvironment("specreport")

    @env.task(report=True)
    def with_report() -> int:
        return 1

    @env.task
    def without() -> int:
        return 1

    assert with_report.spec().report is True and without.spec().report is False


def test_a_session_writes_on_flush_and_at_the_end() -> None:
    pages: list[str] = []
    with reporting(_session(pages)):
        shoal.report.log("<p>a</p>")
        assert pages == []  # nothing is stored before a flush
        shoal.report.log("<p>b</p>", do_flush=True)
        shoal.report.get_tab("Other").log("<p>c</p>")
        shoal.report.flush()
    assert len(pages) == 3
    assert "status</b> running" in pages[0] and "<p>c</p>" not in pages[0]
    assert "<p>c</p>" in pages[1] and "status</b> finished" in pages[2]
    with pytest.warns(UserWarning, match="outside a task"):  # the session ended with the block
        assert shoal.report.current_report().name == "unsaved"


def test_a_failing_body_still_writes_its_report_and_raises() -> None:
    pages: list[str] = []
    with pytest.raises(ZeroDivisionError), reporting(_session(pages)):
        shoal.report.replace("<p>before</p>")
        _ = 1 / 0
    assert "failed: ZeroDivisionError: division by zero" in pages[-1]
    assert "<p>before</p>" in pages[-1]


def test_a_store_failure_at_the_end_is_printed_not_raised(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    def broken(page: bytes) -> None:
        raise StoreError("disk full")

    with reporting(ReportSession(Report("t"), [], write=broken)):
        shoal.report.log("<p>x</p>")
    assert "could not be stored: disk full" in capsys.readouterr().err


def test_async_forms_see_the_running_session() -> None:
    pages: list[str] = []

    async def body() -> None:
        await shoal.report.log.aio("<p>async</p>")
        await shoal.report.replace.aio("<p>replaced</p>", do_flush=True)
        await shoal.report.flush.aio()

    with reporting(_session(pages)):
        asyncio.run(body())
    assert len(pages) == 3 and "<p>replaced</p>" in pages[0] and "async" not in pages[0]


def test_outside_a_task_warns_once_and_stores_nothing() -> None:
    with pytest.warns(UserWarning, match="outside a task: nothing is stored"):
        shoal.report.log("<p>x</p>")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shoal.report.flush()
        shoal.report.get_tab("x").log("<p>y</p>")


def test_a_task_without_report_true_warns_once_per_call_naming_the_fix() -> None:
    for action in ("a0.1", "a0.2"):
        with running(TaskContext(run_name="r", action=action, task="env.plain", attempt=0)):
            with pytest.warns(UserWarning, match=rf"'env.plain' \(action {action}\) was "
                                                 r"declared without report=True.*report=True\)"):
                shoal.report.log("<p>x</p>")
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                shoal.report.flush()


def test_a_session_that_is_not_stored_warns_once_with_its_reason() -> None:
    session = ReportSession(Report("t"), [], write=None, not_stored="rank 1: not stored")
    with reporting(session):
        with pytest.warns(UserWarning, match="rank 1: not stored"):
            shoal.report.log("<p>x</p>", do_flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            shoal.report.flush()
    assert session.report.tabs["main"].content == ["<p>x</p>"]


def test_reports_live_in_the_attempt_folder_and_are_listed_in_action_order(tmp_path: Path
                                                                          ) -> None:
    store = open_store(tmp_path.as_uri())
    assert report_uri(store.root, "r-1", "a0.2", 1) == f"{store.root}/runs/r-1/a0.2/1/report.html"
    for action, attempt in (("a0.10", 0), ("a0.9", 1), ("a0.9", 0), ("a0", 0)):
        store.put_bytes(report_uri(store.root, "r-1", action, attempt), b"<html>")
    store.put_bytes(f"{store.root}/runs/r-1/a0/0/r0/output.json", b"{}")
    store.put_bytes(f"{store.root}/runs/r-10/a0/0/report.html", b"<html>")  # another run
    found = [(r.action, r.attempt) for r in stored_reports(store, "r-1")]
    assert found == [("a0", 0), ("a0.9", 0), ("a0.9", 1), ("a0.10", 0)]
