"""Fixtures of the UI tests: a real `shoal ui` process on a free port, and a real browser
(Debian's chromium driven by Playwright; no browser download), skipped when either is absent."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@dataclass
class Server:
    url: str  # with ?token=
    base: str
    token: str
    proc: subprocess.Popen[str]


def start_ui(port: int = 0, timeout: float = 30.0, extra: list[str] | None = None,
             path: str = "/") -> Server:
    """`shoal ui --port 0 [EXTRA]` as a user runs it; the printed URL (of ``path``) tells
    where it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "ui", "--port", str(port),
                             *(extra or [])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ.copy())
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"(http://[^/]+)" + re.escape(path) + r"\?token=(\S+)", line)
        if m:
            return Server(m.group(0), m.group(1), m.group(2), proc)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    pytest.fail(f"shoal ui did not print its URL: {proc.stdout.read()}")


def stop_ui(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
    if server.proc.stdout is not None:
        server.proc.stdout.close()


@pytest.fixture
def ui_server(shoal_home: Path) -> Iterator[Server]:
    pytest.importorskip("starlette", reason="the ui extra is not installed: pip install -e '.[ui]'")
    pytest.importorskip("uvicorn", reason="the ui extra is not installed: pip install -e '.[ui]'")
    server = start_ui()
    assert server.base.startswith("http://127.0.0.1:"), server.url  # loopback by default
    try:
        yield server
    finally:
        stop_ui(server)


def _missing(why: str) -> None:
    """Skip where the browser cannot be had; fail in CI (`SHOAL_REQUIRE_BROWSER=1`, set by
    .ci/run), where a skipped tier would pass unnoticed."""
    if os.environ.get("SHOAL_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{why} (SHOAL_REQUIRE_BROWSER=1: the browser tests must run here)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Module-scoped, not session: Playwright's sync API keeps an event loop running in this
    # thread while it is open, and later tests' asyncio.run() would refuse to start.
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        _missing("no chromium at /usr/bin/chromium: apt-get install -y chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright (Python) is not installed: pip install -e '.[dev]'")
    with sync_playwright() as pw:
        exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
        b = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


def screenshots_dir() -> Path:
    folder = Path(os.environ.get("SHOAL_UI_SCREENSHOTS") or ROOT / "build" / "ui-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder
