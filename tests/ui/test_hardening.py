"""`shoal ui` answers as a hardened site: security headers on every answer, the token's
redirect never leaves the server, and listening beyond loopback only when asked (HTTPS with
--certfile/--keyfile, else a plain-HTTP warning)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from shoal._runtime.observe.metrics import MetricsWriter, metrics_path
from shoal._storage.records import Records
from shoal._ui import pages
from shoal._ui.app import build_app
from shoal._ui.guard import allowed_hosts
from shoal.cli.main import main
from shoal.errors import SpecError

from .conftest import Server

TOKEN = "s3cret-token"
BASE = "http://127.0.0.1:8484"


@pytest.fixture
def client(shoal_home: Path) -> Iterator[TestClient]:
    app = build_app(shoal_home, token=TOKEN, hosts=allowed_hosts("127.0.0.1", 8484), port=8484)
    with TestClient(app, base_url=BASE, follow_redirects=False) as c:
        yield c


@pytest.fixture
def run_name(shoal_home: Path) -> str:
    records = Records(shoal_home / "shoal.db")
    run = records.create_run(task="m.main", code_file="m.py", engine="local",
                             store=(shoal_home / "store").as_uri(), inputs={})
    return run.name


# --- headers ----------------------------------------------------------------------------------

AUTH = {"X-Shoal-Token": TOKEN}


def _answers(client: TestClient, run: str) -> dict[str, httpx.Response]:
    return {
        "page": client.get(f"/runs/{run}", headers=AUTH),
        "runs page": client.get("/", headers=AUTH),
        "api": client.get("/api/runs", headers=AUTH),
        "api run": client.get(f"/api/runs/{run}", headers=AUTH),
        "static": client.get("/static/app.css", headers=AUTH),
        "vendored": client.get("/static/vendor/uplot/uPlot.iife.min.js", headers=AUTH),
        "404 page": client.get("/runs/no-such-run", headers=AUTH),
        "404 api": client.get("/api/runs/no-such-run", headers=AUTH),
        "404 route": client.get("/nowhere", headers=AUTH),
        "401": client.get("/api/runs"),
        "403 token": client.get("/api/runs", headers={"X-Shoal-Token": "wrong"}),
        "403 host": client.get("/api/runs", headers={**AUTH, "Host": "evil.example:8484"}),
        "403 origin": client.post(f"/api/runs/{run}/cancel",
                                  headers={"Origin": "http://evil.example", "Cookie":
                                           f"shoal_ui_token_8484={TOKEN}"}),
        "redirect": client.get(f"/runs/{run}?token={TOKEN}"),
        "405": client.get(f"/api/runs/{run}/cancel", headers=AUTH),
    }


def test_every_answer_carries_the_security_headers(client: TestClient, run_name: str) -> None:
    answers = _answers(client, run_name)
    statuses = {what: r.status_code for what, r in answers.items()}
    assert statuses == {"page": 200, "runs page": 200, "api": 200, "api run": 200,
                        "static": 200, "vendored": 200, "404 page": 404, "404 api": 404,
                        "404 route": 404, "401": 401, "403 token": 403, "403 host": 403,
                        "403 origin": 403, "redirect": 303, "405": 405}
    for what, r in answers.items():
        h = r.headers
        assert h.get("x-content-type-options") == "nosniff", what
        assert h.get("x-frame-options") == "DENY", what
        assert h.get("referrer-policy") == "no-referrer", what
        csp = h.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, what
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, what
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, what
        assert len(h.get_list("content-security-policy")) == 1, what


def test_answers_holding_run_data_are_not_stored(client: TestClient, run_name: str) -> None:
    for path in ("/api/runs", f"/api/runs/{run_name}", f"/api/runs/{run_name}/logs",
                 f"/api/runs/{run_name}/metrics", f"/runs/{run_name}"):
        r = client.get(path, headers=AUTH)
        assert r.status_code == 200, path
        assert r.headers.get_list("cache-control") == ["no-store"], path
    assert client.get("/api/runs").headers["cache-control"] == "no-store"  # the 401 too


def test_the_pages_hold_no_inline_script_or_style() -> None:
    """What makes `script-src 'self'` and `style-src 'self'` fit: nothing inline to allow."""
    for html in (pages.runs_page(), pages.run_page("r"), pages.logs_page("r"),
                 pages.metrics_page("r"), pages.not_found_page("x", "y")):
        assert "<style" not in html and " style=" not in html
        assert re.findall(r"<script(?![^>]*\ssrc=)", html) == []
        assert re.search(r"\son[a-z]+=", html) is None  # no onclick= handlers either
    for js in (Path(pages.__file__).parent / "static").glob("*.js"):
        text = js.read_text()
        assert "eval(" not in text and "new Function" not in text, js
        assert "innerHTML" not in text, js


# --- the token's redirect ---------------------------------------------------------------------

OFF_SITE = ["//evil.com", "///evil.com", "////evil.com/x", "/\\evil.com", "/\\/evil.com",
            "/%2F%2Fevil.com", "/%2f/evil.com", "/%5C%5Cevil.com", "//evil.com/%2e%2e",
            "/%09/evil.com", "//evil.com@127.0.0.1:8484/", "/http://evil.com",
            "//127.0.0.1:8484@evil.com"]


def _on_site(location: str) -> bool:
    """A Location a browser resolves on this server: one leading "/", then no slash or
    backslash, nothing a browser drops (tab, newline) or reads as a separator."""
    if not location.startswith("/") or location[1:2] in ("/", "\\"):
        return False
    if any(c in location for c in "\\\t\r\n "):
        return False
    return urlsplit(urljoin(BASE + "/", location)).netloc == "127.0.0.1:8484"


@pytest.mark.parametrize("path", OFF_SITE)
def test_the_token_redirect_stays_on_this_server(client: TestClient, path: str) -> None:
    r = client.get(f"{BASE}{path}?token={TOKEN}&x=1")
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    assert _on_site(location), location
    assert location.endswith("?x=1") and TOKEN not in location


def _raw_get(base: str, target: bytes) -> bytes:
    """One request as bytes on the wire, so the path is exactly what a hostile link sends."""
    host, port = urlsplit(base).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: " + f"{host}:{port}".encode() +
                  b"\r\nConnection: close\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_the_real_server_redirect_stays_on_it(ui_server: Server) -> None:
    base, token = ui_server.base, ui_server.token
    for path in ("//evil.com", "///evil.com", "/\\evil.com", "/%2F%2Fevil.com",
                 "/%5C%5Cevil.com"):
        answer = _raw_get(base, f"{path}?token={token}".encode())
        head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        assert head.split(" ", 2)[1] == "303", head
        (location,) = re.findall(r"(?im)^location: (.*)$", head)
        assert _on_site(location.strip()), (path, location)
        assert "x-frame-options: deny" in head.lower()


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["/", "\\", "%2F", "%2f", "%5C", "%09", "\t", " ", "evil.com",
                                 "@", ":", "http:", ".", "..", "%", "runs", "?", "#", "é"]),
                min_size=1, max_size=10))
def test_any_path_gives_a_location_on_this_server(parts: list[str]) -> None:
    from shoal._ui.guard import local_location

    raw = ("/" + "".join(parts)).encode()
    location = local_location({"raw_path": raw, "path": raw.decode()})
    assert _on_site(location), (raw, location)


# --- listening beyond loopback ----------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "localhost", "[::1]"])
def test_loopback_needs_no_flag(host: str) -> None:
    from shoal._ui.server import check_listen, is_loopback

    assert is_loopback(host)
    assert check_listen(host, allow_remote=False, certfile=None, keyfile=None) == (None, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "192.168.0.5", "example.com",
                                  "127.0.0.1.evil.com"])
def test_another_host_is_refused_without_allow_remote(host: str, shoal_home: Path) -> None:
    # A process (with a time limit), not main(): a server that does start must not hang here.
    try:
        done = subprocess.run([sys.executable, "-m", "shoal.cli.main", "ui", "--host", host,
                               "--port", "0"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"shoal ui --host {host} served instead of refusing")
    assert done.returncode == 2, done
    err = done.stderr
    assert len(err.strip().splitlines()) == 1, err
    assert "--host" in err and host in err and "loopback" in err and "--allow-remote" in err
    from shoal._ui.server import check_listen, is_loopback

    assert not is_loopback(host)
    with pytest.raises(SpecError):
        check_listen(host, allow_remote=False, certfile=None, keyfile=None)


def _start(*args: str, timeout: float = 30.0) -> tuple[subprocess.Popen[str], list[str], str]:
    """`shoal ui ARGS`; what it printed up to its URL, and the URL."""
    proc = subprocess.Popen([sys.executable, "-m", "shoal.cli.main", "ui", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ.copy())
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        m = re.search(r"https?://\S+\?token=\S+", line)
        if m:
            return proc, lines, m.group(0)
    proc.kill()
    pytest.fail(f"shoal ui did not print its URL: {lines}")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def test_allow_remote_over_plain_http_warns_that_the_token_travels_in_clear(
        shoal_home: Path) -> None:
    proc, lines, url = _start("--host", "0.0.0.0", "--allow-remote")
    try:
        text = "".join(lines)
        assert "warning: serving plain HTTP on 0.0.0.0" in text, text
        assert "token" in text and "--certfile" in text
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url, follow_redirects=True).status_code == 200
    finally:
        _stop(proc)


def _self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor the openssl CLI is here")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True,
                       capture_output=True)
        return cert, key
    k = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    c = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now)
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.SubjectAlternativeName(
             [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
         .sign(k, hashes.SHA256()))
    key.write_bytes(k.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    cert.write_bytes(c.public_bytes(serialization.Encoding.PEM))
    return cert, key


def test_certfile_and_keyfile_serve_https(shoal_home: Path, tmp_path: Path,
                                         run_name: str) -> None:
    cert, key = _self_signed(tmp_path)
    proc, lines, url = _start("--certfile", str(cert), "--keyfile", str(key))
    try:
        assert url.startswith("https://127.0.0.1:"), url
        assert "warning" not in "".join(lines)
        ctx = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(verify=ctx) as c:
            first = c.get(url)
            assert first.status_code == 303
            assert "Secure" in first.headers["set-cookie"]
            assert c.get(urljoin(url, "/api/runs")).status_code == 200
            base = url.split("/?", 1)[0]
            asked = c.post(f"{base}/api/runs/{run_name}/cancel", headers={"Origin": base})
            assert asked.status_code == 200, asked.text  # an https page's Origin is this server
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets nothing
            httpx.get(url.replace("https://", "http://"), timeout=5)
    finally:
        _stop(proc)


def test_allow_remote_with_tls_does_not_warn(tmp_path: Path) -> None:
    from shoal._ui.server import check_listen

    cert, key = _self_signed(tmp_path)
    tls, warning = check_listen("0.0.0.0", allow_remote=True, certfile=str(cert),
                                keyfile=str(key))
    assert tls is not None and warning is None


def test_tls_takes_both_files_and_loads_them_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], shoal_home: Path) -> None:
    cert, key = _self_signed(tmp_path)
    assert main(["ui", "--port", "0", "--certfile", str(cert)]) == 2
    assert "--keyfile" in capsys.readouterr().err
    assert main(["ui", "--port", "0", "--keyfile", str(key)]) == 2
    assert "--certfile" in capsys.readouterr().err
    assert main(["ui", "--port", "0", "--certfile", str(cert), "--keyfile",
                 str(tmp_path / "missing.pem")]) == 2
    err = capsys.readouterr().err
    assert "--certfile" in err and "cannot be loaded" in err and len(err.splitlines()) == 1


# --- the pages under their policy, in a real browser -----------------------------------------

def test_the_pages_run_under_their_policy_in_a_browser(ui_server: Server, page: Any,
                                                       shoal_home: Path) -> None:
    """Chromium enforces the policy: no page logs a violation, and the styles the scripts
    set (tree indentation, timeline bars) still apply, through the CSSOM."""
    records = Records(shoal_home / "shoal.db")
    run = records.create_run(task="csp.main", code_file="x.py", engine="local",
                             store=(shoal_home / "store").as_uri(), inputs={})
    records.create_action(run=run.name, action_id="a0", task="csp.main", env="e", inputs={})
    records.create_action(run=run.name, action_id="a1", parent_id="a0", task="csp.child",
                          env="e", inputs={})
    log = shoal_home / "runs" / run.name / "logs" / "a1.0.log"
    log.parent.mkdir(parents=True)
    log.write_text("a line\n")
    records.start_attempt(run.name, "a1", 0, pid=None, log_path=str(log))
    writer = MetricsWriter(metrics_path(shoal_home, run.name, "a1", 0),
                           {"run": run.name, "action": "a1", "attempt": 0, "source": "user"})
    writer.add([("loss", 1.0)], 0, time.time())
    writer.add([("loss", 0.5)], 1, time.time())
    writer.close()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text)
            if "Content Security Policy" in m.text else None)
    page.goto(ui_server.url)
    page.wait_for_selector(f"text={run.name}")
    page.goto(f"{ui_server.base}/runs/{run.name}")
    page.wait_for_selector(".tree-row[data-action='a1']")
    assert page.eval_on_selector(".tree-row[data-action='a1']",
                                 "e => getComputedStyle(e).paddingLeft") == "18px"
    page.wait_for_selector(".tl-bar")
    assert page.eval_on_selector(".tl-bar", "e => e.style.width") not in ("", None)
    page.goto(f"{ui_server.base}/runs/{run.name}/metrics")
    page.wait_for_function("() => window.shoalCharts && window.shoalCharts['user/loss']")
    page.goto(f"{ui_server.base}/runs/{run.name}/logs")
    page.wait_for_function("() => document.getElementById('log').textContent"
                           ".includes('a line')")
    assert violations == []
