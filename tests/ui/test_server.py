"""The `shoal ui` server without a browser: who is let in, the JSON it serves, its bounds."""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient

from shoal._runtime.observe.metrics import MetricsWriter, metrics_path
from shoal._storage.records import PREEMPT_REQUEST, Records, RunRecord
from shoal._ui.app import build_app
from shoal._ui.guard import allowed_hosts
from shoal._ui.server import bind
from shoal.cli.main import main
from shoal.errors import SpecError
from tests.raycluster_records import DASHBOARD, NODES, RAY_LOGS, ray_run

TOKEN = "s3cret-token"
BASE = "http://127.0.0.1:8484"


def _client(home: Path) -> TestClient:
    app = build_app(home, token=TOKEN, hosts=allowed_hosts("127.0.0.1", 8484), port=8484)
    return TestClient(app, base_url=BASE, follow_redirects=False)


@pytest.fixture
def client(shoal_home: Path) -> Iterator[TestClient]:
    with _client(shoal_home) as c:
        yield c


@pytest.fixture
def records(shoal_home: Path) -> Records:
    return Records(shoal_home / "shoal.db")


def _run(records: Records, home: Path, **inputs: object) -> RunRecord:
    run = records.create_run(task="m.main", code_file="m.py", engine="local",
                             store=(home / "store").as_uri(), inputs=inputs)
    records.set_run_state(run.name, "running")
    return records.get_run(run.name)


def _write(home: Path, run: str, rank: int | None, points: list[tuple[str, int, float]],
           action: str = "a0", restart: int | None = None, source: str = "user") -> None:
    restart = 0 if rank is not None and restart is None else restart
    writer = MetricsWriter(metrics_path(home, run, action, 0, restart, rank, source),
                           {"run": run, "action": action, "attempt": 0, "restart": restart,
                            "node": None if rank is None else rank // 2, "rank": rank,
                            "source": source})
    for name, step, value in points:
        writer.add([(name, value)], step, 1000.0 + step)
    writer.close()


def test_a_request_without_the_token_is_refused(client: TestClient) -> None:
    assert client.get("/api/runs").status_code == 401
    assert client.get("/").status_code == 401
    assert client.get("/api/runs?token=wrong").status_code == 403
    assert client.get("/static/app.css").status_code == 401
    assert client.get("/api/runs", headers={"X-Shoal-Token": TOKEN}).status_code == 200


def test_the_token_once_then_the_cookie(client: TestClient) -> None:
    first = client.get(f"/runs/anything?token={TOKEN}&x=1")
    assert first.status_code == 303 and first.headers["location"] == "/runs/anything?x=1"
    cookie = first.headers["set-cookie"]
    assert f"shoal_ui_token_8484={TOKEN}" in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert client.get("/api/runs").status_code == 200  # the cookie jar carries it now


def test_the_host_header_must_name_this_server(client: TestClient) -> None:
    ok = {"X-Shoal-Token": TOKEN}
    for host in ("127.0.0.1:8484", "localhost:8484", "[::1]:8484"):
        assert client.get("/api/runs", headers={**ok, "Host": host}).status_code == 200, host
    for host in ("evil.example:8484", "127.0.0.1:9999", "rebound.example", ""):
        res = client.get("/api/runs", headers={**ok, "Host": host})
        assert res.status_code == 403 and "DNS rebinding" in res.text, host


def test_cancel_and_preempt_need_the_token_and_this_origin(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = _run(records, shoal_home)
    client.get(f"/?token={TOKEN}")
    url = f"/api/runs/{run.name}"
    assert client.post(f"{url}/cancel", headers={"Origin": "http://evil.example"}
                       ).status_code == 403
    assert client.post(f"{url}/cancel").status_code == 403  # a cookie alone, no Origin
    assert not records.cancel_requested(run.name)
    res = client.post(f"{url}/preempt", headers={"Origin": BASE})
    assert res.status_code == 200 and res.json()["requested"] is True
    assert [e.kind for e in records.events(run.name)] == [PREEMPT_REQUEST]
    res = client.post(f"{url}/cancel", headers={"X-Shoal-Token": TOKEN})
    assert res.status_code == 200 and res.json()["requested"] is True
    assert records.cancel_requested(run.name)
    assert client.get(f"{url}/cancel").status_code == 405  # GET never acts


def test_an_unknown_run_is_a_404_naming_it(client: TestClient) -> None:
    client.get(f"/?token={TOKEN}")
    page = client.get("/runs/r-nope-123")
    assert page.status_code == 404 and "r-nope-123" in page.text and "<h1>" in page.text
    api = client.get("/api/runs/r-nope-123/metrics")
    assert api.status_code == 404 and "r-nope-123" in api.json()["error"]


def test_run_json_has_the_tree_timeline_marks_and_previews(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = _run(records, shoal_home, big="x" * 5000)
    records.create_action(run=run.name, action_id="a0", task="m.main", env="e",
                          inputs={"big": "x" * 5000})
    records.create_action(run=run.name, action_id="a0.1", parent_id="a0", task="m.child",
                          env="e", inputs={"i": 1}, group_path=("phase",))
    records.start_attempt(run.name, "a0.1", 0, pid=None, log_path=None)
    records.finish_attempt(run.name, "a0.1", 0, state="failed", exit_code=1)
    records.start_attempt(run.name, "a0.1", 1, pid=None, log_path=None)
    records.add_event(run.name, "retry", "m.child attempt 0 failed", action_id="a0.1")
    client.get(f"/?token={TOKEN}")
    doc = client.get(f"/api/runs/{run.name}").json()
    assert [a["id"] for a in doc["actions"]] == ["a0", "a0.1"]
    child = doc["actions"][1]
    assert child["parent"] == "a0" and child["group"] == ["phase"]
    assert [a["state"] for a in child["attempts"]] == ["failed", "running"]
    assert [m["kind"] for m in doc["marks"]] == ["retry"]
    assert doc["actions"][0]["inputs"]["cut"] > 0 and len(doc["actions"][0]["inputs"]["text"]) \
        == 2000
    listed = client.get("/api/runs").json()["runs"]
    assert listed[0]["name"] == run.name and listed[0]["state"] == "running"


def test_metrics_json_a_line_per_rank_with_non_finite_flagged(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = _run(records, shoal_home)
    for rank in range(4):
        _write(shoal_home, run.name, rank, [("loss", s, 1.0 / (s + 1 + rank)) for s in range(5)])
    _write(shoal_home, run.name, 1, [("loss", 5, math.nan), ("loss", 6, math.inf)])
    # rank 1's gang restart: its steps 3.. replace the first start's (it resumed)
    _write(shoal_home, run.name, 1, [("loss", 3, 9.0)], restart=1)
    _write(shoal_home, run.name, 0, [("cpu_percent", 0, 55.0)], source="system")
    client.get(f"/?token={TOKEN}")
    doc = client.get(f"/api/runs/{run.name}/metrics").json()
    chart, system = doc["charts"]  # the user's metrics first, the system's beside them
    assert (system["source"], system["name"], system["lines"][0]["y"]) == (
        "system", "cpu_percent", [55.0])
    assert chart["name"] == "loss" and not chart["band"]
    assert [line["label"] for line in chart["lines"]] == [f"rank {r}" for r in range(4)]
    r1 = chart["lines"][1]
    assert r1["x"] == [0, 1, 2, 3, 4, 5, 6]
    assert r1["y"][3] == 9.0 and r1["y"][5:] == [None, None] and r1["non_finite"] == 2
    by_time = client.get(f"/api/runs/{run.name}/metrics?x=time").json()
    assert by_time["x"] == "time" and len(by_time["charts"][0]["lines"][1]["x"]) == 8
    assert client.get(f"/api/runs/{run.name}/metrics?x=epoch").status_code == 400


def test_many_ranks_are_a_min_median_max_band(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = _run(records, shoal_home)
    for rank in range(10):
        _write(shoal_home, run.name, rank, [("loss", s, float(rank)) for s in range(3)])
    client.get(f"/?token={TOKEN}")
    (chart,) = client.get(f"/api/runs/{run.name}/metrics").json()["charts"]
    assert chart["band"] and chart["ranks"] == 10
    assert [line["label"] for line in chart["lines"]] == [
        "min of 10 ranks", "median of 10 ranks", "max of 10 ranks"]
    assert [line["y"][0] for line in chart["lines"]] == [0.0, 4.5, 9.0]


def test_4_ranks_of_100k_points_are_downsampled_on_the_server(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = _run(records, shoal_home)
    n = 100_000
    for rank in range(4):
        _write(shoal_home, run.name, rank, [("loss", s, math.sin(s / 500) + rank)
                                            for s in range(n)])
    client.get(f"/?token={TOKEN}")
    t0 = time.perf_counter()
    res = client.get(f"/api/runs/{run.name}/metrics")
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = client.get(f"/api/runs/{run.name}/metrics")
    cached = time.perf_counter() - t0
    (chart,) = res.json()["charts"]
    assert again.content == res.content
    for line in chart["lines"]:
        assert line["points"] == n and 1000 <= len(line["x"]) <= 2000
        assert max(v for v in line["y"] if v is not None) > line["rank"] + 0.999  # peaks kept
    print(f"\n4 ranks x 100k points: first answer {first * 1000:.0f} ms (reads the files), "
          f"then {cached * 1000:.1f} ms; {len(res.content) / 1024:.0f} KiB")


def test_logs_stream_cut_huge_lines_and_download_whole(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = _run(records, shoal_home)
    records.create_action(run=run.name, action_id="a0", task="m.main", env="e", inputs={})
    log = shoal_home / "runs" / run.name / "logs" / "a0.0.log"
    log.parent.mkdir(parents=True)
    huge = "y" * 50_000
    longer = "z" * 600_000  # longer than one read of the tail: it comes in pieces
    log.write_text(f"hello\n{huge}\nlast\n{longer}\nend\n")
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=str(log))
    client.get(f"/?token={TOKEN}")
    (source,) = client.get(f"/api/runs/{run.name}/logs").json()["sources"]
    assert source["key"] == "a0.0.task" and source["kind"] == "task"
    base = f"/api/runs/{run.name}/logs/{source['key']}"
    body = client.get(f"{base}/stream?follow=0").text
    events = [json.loads(b.split("data: ", 1)[1]) for b in body.split("\n\n")
              if b.startswith("event: lines")]
    lines = [line for batch in events for line in batch]
    assert [line[:5] for line in lines] == ["hello", "yyyyy", "last", "zzzzz", "end"]
    assert lines[1].startswith("y" * 4000) and "[cut: 46000 more characters" in lines[1]
    assert lines[3].startswith("z" * 4000) and "[cut: 596000 more characters" in lines[3]
    download = client.get(f"{base}/download")
    assert download.status_code == 200
    assert download.text == f"hello\n{huge}\nlast\n{longer}\nend\n"
    assert "attachment" in download.headers["content-disposition"]
    assert client.get(f"/api/runs/{run.name}/logs/a9.0.task/stream").status_code == 404


def test_a_silent_calls_log_downloads_empty(client: TestClient, records: Records,
                                           shoal_home: Path) -> None:
    """A plain call that printed nothing has no file (`worker.CallOutput`): its log is empty."""
    run = _run(records, shoal_home)
    records.create_action(run=run.name, action_id="a0", task="m.main", env="e", inputs={})
    log = shoal_home / "runs" / run.name / "logs" / "a0.0.log"
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=str(log))
    client.get(f"/?token={TOKEN}")
    download = client.get(f"/api/runs/{run.name}/logs/a0.0.task/download")
    assert download.status_code == 200 and download.content == b""
    assert f'filename="{run.name}.a0.0.task.log"' in download.headers["content-disposition"]
    body = client.get(f"/api/runs/{run.name}/logs/a0.0.task/stream?follow=0").text
    assert "event: lines" not in body


def test_a_port_in_use_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(SpecError) as err:
            bind("127.0.0.1", port)
        assert err.value.field == "--port" and str(port) in str(err.value)
        assert main(["ui", "--port", str(port)]) == 2
    out = capsys.readouterr().err
    assert f"--port={port}: is already in use" in out and "--port 0" in out


def test_gang_json_grid_failure_preemption_and_checkpoints(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    """The gang panel's data from what a 2-node × 2-rank gang leaves: a start whose rank 2
    raised, a start preempted, a start that is still running, and two checkpoints."""
    from shoal import _contract as contract
    from shoal._storage.checkpoints import Version, Versions
    from shoal._storage.store import join, open_store

    run = _run(records, shoal_home)
    records.create_action(run=run.name, action_id="a0", task="g.train", env="g", inputs={})
    logs = shoal_home / "runs" / run.name / "logs"
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=str(logs / "a0.0.log"))
    for restart in range(3):
        folder = logs / "gang" / "a0.0" / f"r{restart}"
        folder.mkdir(parents=True)
        for n in range(2):
            (folder / f"node{n}.log").write_text("")
        for r in range(4):
            (folder / f"rank{r}.log").write_text(f"rank {r} line\n")
        records.add_event(run.name, "gang_started", "started", action_id="a0",
                          data={"restart": restart})
        if restart == 0:
            (folder / "rank2.log").write_text("about to fail\nValueError: bad batch\n")
            records.add_event(run.name, "gang_restart", "rank 2 failed", action_id="a0",
                              data={"restart": 0, "rank": 2, "left": 1})
        if restart == 1:
            records.add_event(run.name, "gang_preempted", "preempted", action_id="a0",
                              data={"restart": 1})
    store = open_store(run.store)
    io = join(run.store, "runs", run.name, "a0", "0")
    store.put_bytes(join(io, "r0", "rank-2.failure.json"), json.dumps({
        "rank": 2, "node": 1, "at": time.time(), "message": "ValueError: bad batch",
        "error_type": "ValueError", "traceback": "Traceback ...\nValueError: bad batch\n",
    }).encode())
    versions = Versions(store, contract.checkpoint_uri(run.store, run.name, "a0"))
    # step 5 as commits before they recorded their writer; step 10 recorded (restart 1 wrote
    # it, although restart 2 was running at its time: the record wins over the inference)
    versions.commit(Version(step=5, kind="bytes", world_size=4, shards=()))
    versions.commit(Version(step=10, kind="bytes", world_size=4, shards=(),
                            written_by={"attempt": 0, "restart": 1}))
    # step 15 by the gang of another run sharing the checkpoint (one this run resumed)
    versions.commit(Version(step=15, kind="bytes", world_size=4, shards=(),
                            written_by={"run": "r-earlier", "attempt": 0, "restart": 0}))

    client.get(f"/?token={TOKEN}")
    doc = client.get(f"/api/runs/{run.name}/gangs/a0").json()
    (attempt,) = doc["attempts"]
    starts = attempt["starts"]
    assert [s["ended"] for s in starts] == ["restarted", "preempted", "running"]
    grid = [[(r["rank"], r["state"]) for r in n["ranks"]] for n in starts[0]["nodes"]]
    assert grid == [[(0, "stopped"), (1, "stopped")], [(2, "raised"), (3, "stopped")]]
    first = starts[0]["first_failure"]
    assert (first["rank"], first["node"], first["error_type"]) == (2, 1, "ValueError")
    assert "ValueError: bad batch" in first["traceback"]
    assert first["log_tail"] == "about to fail\nValueError: bad batch"
    assert starts[1]["first_failure"] is None
    assert [e["kind"] for e in doc["events"]] == [
        "gang_started", "gang_restart", "gang_started", "gang_preempted", "gang_started"]
    assert [(c["step"], c["version"], c["written_by"], c["inferred"])
            for c in doc["checkpoints"]] == [
        (5, "v000000000005", {"attempt": 0, "restart": 2}, True),
        (10, "v000000000010", {"attempt": 0, "restart": 1}, False),
        (15, "v000000000015", {"run": "r-earlier", "attempt": 0, "restart": 0}, False)]
    assert client.get(f"/api/runs/{run.name}/gangs/a7").status_code == 404


def test_shoal_ui_run_prints_that_runs_page(records: Records, shoal_home: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from .conftest import start_ui, stop_ui

    run = _run(records, shoal_home)
    assert main(["ui", "no-such-run", "--port", "0"]) == 2
    assert "no-such-run" in capsys.readouterr().err
    server = start_ui(extra=[run.name[:-2]], path=f"/runs/{run.name}")
    try:
        import http.cookiejar
        import urllib.request

        browser_like = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        with browser_like.open(server.url, timeout=10) as reply:  # the token, cookie, the page
            assert reply.status == 200 and run.name in reply.read().decode()
    finally:
        stop_ui(server)


def test_profiles_json_has_each_windows_verdict_and_straggler(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    """Two ranks of a profiled window: rank 1 computes while rank 0 waits in the all_reduce."""
    from shoal._storage.profile_files import profiles_dir

    def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict:
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}

    run = _run(records, shoal_home)
    window = profiles_dir(shoal_home, run.name) / "a0.0" / "r0" / "steps-1-1"
    window.mkdir(parents=True)
    for rank, (mm, wait) in enumerate(((100, 800), (800, 100))):
        events = [op("ProfilerStep#1", 0, 1000, cat="user_annotation"), op("aten::mm", 0, mm),
                  op("gloo:all_reduce", mm, wait, tid=9, cat="user_annotation")]
        (window / f"rank{rank}.json").write_text(json.dumps({"traceEvents": events}))
    client.get(f"/?token={TOKEN}")
    (w,) = client.get(f"/api/runs/{run.name}/profiles").json()["windows"]
    assert (w["action"], w["attempt"], w["restart"], w["window"]) == ("a0", 0, 0, "steps-1-1")
    assert w["summary"]["stragglers"]["straggler"] == 1
    assert "bound" in w["summary"]["verdict"]
    assert not list(window.parent.glob("*.summary.json"))  # the UI writes nothing
    assert client.get("/api/runs/nope/profiles").status_code == 404


def test_a_hang_diagnosis_stacks_are_log_sources_of_their_own(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = _run(records, shoal_home)
    records.create_action(run=run.name, action_id="a0", task="m.train", env="e", inputs={})
    gang = shoal_home / "runs" / run.name / "logs" / "gang" / "a0.0" / "r0"
    gang.mkdir(parents=True)
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=str(gang.parent.parent.parent
                                                                     / "a0.0.log"))
    for rank in range(4):
        (gang / f"rank{rank}.log").write_text(f"rank {rank}\n")
    for node in range(2):
        (gang / f"node{node}.log").write_text("launcher\n")
    (gang / "stacks-rank2.txt").write_text("Thread 1: time.sleep\n")
    (gang / "stacks-rank3.txt").write_text("Thread 1: all_reduce\n")
    (gang / "hang.txt").write_text("hang: rank 2 stopped answering\n")
    client.get(f"/?token={TOKEN}")
    sources = client.get(f"/api/runs/{run.name}/logs").json()["sources"]
    keys = [s["key"] for s in sources]
    assert len(keys) == len(set(keys)), keys  # one key per file, never shared
    stacks = {s["key"]: s["title"] for s in sources if s["kind"] == "stacks"}
    assert set(stacks) == {"a0.0.r0.stacks2", "a0.0.r0.stacks3", "a0.0.r0.stacksall"}
    assert "rank 2 stacks" in stacks["a0.0.r0.stacks2"]
    assert "hang diagnosis" in stacks["a0.0.r0.stacksall"]
    body = client.get(f"/api/runs/{run.name}/logs/a0.0.r0.stacks2/download").text
    assert "time.sleep" in body


def test_gang_json_of_an_elastic_gang_says_each_starts_size_cause_and_resize(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    """2 → 1 → 2 nodes: each start's nodes, world size and cause, and the resize before it."""
    from .elastic import elastic_run

    run = elastic_run(records, shoal_home)
    client.get(f"/?token={TOKEN}")
    doc = client.get(f"/api/runs/{run.name}/gangs/a0").json()
    (attempt,) = doc["attempts"]
    assert attempt["elastic"] is True
    starts = attempt["starts"]
    assert [(s["restart"], s["nnodes"], s["nproc_per_node"], s["world_size"], s["cause"],
             s["cause_text"]) for s in starts] == [
        (0, 2, 2, 4, "first_start", "first start"), (1, 1, 2, 2, "node_lost", "node lost"),
        (2, 2, 2, 4, "grown", "grown")]
    assert starts[0]["resize"] is None
    assert starts[1]["resize"] == {"from": 2, "to": 1, "cause": "node_lost", "nodes": [1],
                                   "reason": "node 1 lost (its launcher exited, -9)"}
    assert starts[2]["resize"]["from"] == 1 and starts[2]["resize"]["to"] == 2
    assert [(s["min_nnodes"], s["max_nnodes"]) for s in starts] == [(1, 2)] * 3
    assert all(s["started_at"] is not None for s in starts)
    # each start's grid has its own nodes: the 1-node start has 2 ranks
    assert [[len(n["ranks"]) for n in s["nodes"]] for s in starts] == [[2, 2], [2], [2, 2]]
    assert "gang_resized" in [e["kind"] for e in doc["events"]]


def test_gang_json_of_old_records_has_a_cause_and_no_size(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    """Records of an older Shoal: gang_started without topology or cause."""
    run = _run(records, shoal_home)
    records.create_action(run=run.name, action_id="a0", task="g.train", env="g", inputs={})
    records.start_attempt(run.name, "a0", 0, pid=None, log_path=None)
    for restart in range(2):
        records.add_event(run.name, "gang_started", "started", action_id="a0",
                          data={"restart": restart})
    client.get(f"/?token={TOKEN}")
    (attempt,) = client.get(f"/api/runs/{run.name}/gangs/a0").json()["attempts"]
    assert attempt["elastic"] is False
    assert [(s["cause"], s["world_size"], s["resize"]) for s in attempt["starts"]] == [
        ("first_start", None, None), ("restart", None, None)]


def test_gang_json_of_a_ray_call_has_its_cluster_and_each_nodes_group(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = ray_run(records, shoal_home, state="running")
    client.get(f"/?token={TOKEN}")
    (attempt,) = client.get(f"/api/runs/{run.name}/gangs/a0").json()["attempts"]
    (start,) = attempt["starts"]
    assert start["ray"]["dashboard_url"] == DASHBOARD
    assert start["ray"]["client_address"] == "ray://127.0.0.2:10001"
    assert start["ray"]["nodes"] == NODES
    assert [(n["node"], n["group"]) for n in start["nodes"]] == [(0, "head"), (1, "workers")]
    # a stored URL that is not a plain http(s) one is not passed on to the page
    bad = ray_run(records, shoal_home, dashboard_url="javascript:alert(document.cookie)")
    (attempt,) = client.get(f"/api/runs/{bad.name}/gangs/a0").json()["attempts"]
    assert attempt["starts"][0]["ray"]["dashboard_url"] is None


def test_a_ray_nodes_session_logs_are_log_sources(
        client: TestClient, records: Records, shoal_home: Path) -> None:
    run = ray_run(records, shoal_home)
    folder = shoal_home / "runs" / run.name / "logs" / "gang" / "a0.0" / "r0" / "ray-node1"
    (folder / "stolen.log").symlink_to(shoal_home / "shoal.db")  # never served
    client.get(f"/?token={TOKEN}")
    sources = client.get(f"/api/runs/{run.name}/logs").json()["sources"]
    ray = {s["key"]: s["title"] for s in sources if s["kind"] == "ray"}
    assert set(ray) == {f"a0.0.r0.ray{n}.{f}" for n, files in RAY_LOGS.items() for f in files}
    assert ray["a0.0.r0.ray1.raylet.out"] == "r.fit a0 node 1 Ray raylet.out attempt 0 restart 0"
    body = client.get(f"/api/runs/{run.name}/logs/a0.0.r0.ray1.raylet.out/stream?follow=0").text
    assert "worker raylet up" in body
    assert client.get(f"/api/runs/{run.name}/logs/a0.0.r0.ray1.stolen.log/download"
                      ).status_code == 404
