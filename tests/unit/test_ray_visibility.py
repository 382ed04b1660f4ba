"""A Ray call's cluster as `shoal runs`, `shoal runs RUN` and `shoal logs --node` show it, from
recorded events and log folders (tests/raycluster_records.py); the real cluster is tested in
tests/raycluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal._storage.logs import log_sources
from shoal._storage.ray_clusters import latest, ray_clusters, safe_url
from shoal._storage.records import Records
from shoal.cli.main import main
from tests.raycluster_records import DASHBOARD, RAY_LOGS, ray_run


@pytest.fixture
def records(shoal_home: Path) -> Records:
    shoal_home.mkdir(parents=True, exist_ok=True)
    return Records(shoal_home / "shoal.db")


@pytest.mark.parametrize("url", [
    "http://127.0.0.2:8265", "https://ray.example.org/dash?x=1", "http://[::1]:8265/"])
def test_a_plain_http_url_is_kept(url: str) -> None:
    assert safe_url(url) == url


def test_a_bare_host_and_port_is_taken_as_http() -> None:
    # KubeRay's status.dashboardURL
    assert safe_url("rayjob-x-head-svc.ns.svc:8265") == "http://rayjob-x-head-svc.ns.svc:8265"
    assert safe_url("host:8265/x") == "http://host:8265/x"
    assert safe_url("host:") is None and safe_url("host:80 x") is None


def test_a_start_reported_again_keeps_its_last_report(shoal_home: Path,
                                                      records: Records) -> None:
    run = ray_run(records, shoal_home, state="running")
    records.add_event(run.name, "ray_cluster", "again", action_id="a0",
                      data={"restart": 0, "dashboard_url": "head:8266", "nodes": []})
    (cluster,) = ray_clusters(records.events(run.name), records.list_attempts(run.name))[
        ("a0", 0)]
    assert cluster.dashboard_url == "http://head:8266"


@pytest.mark.parametrize("url", [
    "javascript:alert(1)", "data:text/html,<b>x</b>", "file:///etc/passwd", "//host:1",
    "http://", "http:///path", "ftp://h/", "http://h:99999x/", "http://h/\x1b[31mred",
    "http://h/ x", 'http://h/"onmouseover=alert(1)', "http://h/<script>", "", None, 42,
    "http://h/" + "a" * 3000])
def test_anything_else_is_not_a_dashboard_url(url: object) -> None:
    assert safe_url(url) is None


def test_the_cluster_is_read_from_its_event(shoal_home: Path, records: Records) -> None:
    run = ray_run(records, shoal_home)
    clusters = ray_clusters(records.events(run.name), records.list_attempts(run.name))
    (cluster,) = clusters[("a0", 0)]
    assert (cluster.dashboard_url, cluster.address, cluster.client_address) == (
        DASHBOARD, "127.0.0.2:6379", "ray://127.0.0.2:10001")
    assert [(n.node, n.group, n.address) for n in cluster.nodes] == [
        (0, "head", "127.0.0.2"), (1, "workers", "127.0.0.3")]
    assert cluster.group_of(1) == "workers" and cluster.group_of(5) is None
    assert latest(clusters) == {"a0": cluster}


def test_an_untrusted_record_shows_no_link_and_no_escapes(shoal_home: Path, records: Records,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    run = ray_run(records, shoal_home, dashboard_url="javascript:alert(1)",
                  extra={"address": "\x1b]0;owned\x07h:1", "nodes": [
                      {"node": "0"}, "junk", {"node": 1, "group": "w\x1b[2J"}]})
    (cluster,) = ray_clusters(records.events(run.name), records.list_attempts(run.name))[
        ("a0", 0)]
    assert cluster.dashboard_url is None
    assert "\x1b" not in cluster.address and [(n.node, n.group) for n in cluster.nodes] == [
        (1, "w?[2J")]
    assert main(["runs"]) == 0
    assert main(["runs", run.name]) == 0
    out = capsys.readouterr().out
    assert "javascript" not in out and "\x1b" not in out
    assert "ray dashboard a0 r.fit: (none reported as an http(s) URL) (call succeeded)" in out


def test_shoal_runs_shows_the_dashboard_under_its_run(shoal_home: Path, records: Records,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    up = ray_run(records, shoal_home, state="running")
    done = ray_run(records, shoal_home)
    assert main(["runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = {line.split()[0]: i for i, line in enumerate(lines) if not line.startswith(" ")}
    assert lines[at[up.name] + 1] == f"  ray dashboard a0 r.fit: {DASHBOARD}"
    assert lines[at[done.name] + 1] == (f"  ray dashboard a0 r.fit: {DASHBOARD} "
                                        "(call succeeded)")
    assert main(["runs", up.name]) == 0
    tree = capsys.readouterr().out.splitlines()
    assert tree[1].startswith("a0  r.fit  running"), tree
    assert tree[2:] == [f"· ray dashboard: {DASHBOARD}",
                        "· ray address: 127.0.0.2:6379, clients ray://127.0.0.2:10001",
                        "· ray nodes: 0 head 127.0.0.2, 1 workers 127.0.0.3"], tree


def test_ray_session_logs_follow_their_nodes_launcher_log_when_asked(
        shoal_home: Path, records: Records) -> None:
    run = ray_run(records, shoal_home)
    plain = [(s.kind, s.node, s.file) for s in log_sources(shoal_home, records, run.name)]
    assert plain == [("rank", 0, ""), ("node", 0, ""), ("node", 1, "")]
    every = [(s.kind, s.node, s.file) for s in log_sources(shoal_home, records, run.name,
                                                           ray=True)]
    assert every == [("rank", 0, ""), ("node", 0, ""), ("ray", 0, "raylet.out"),
                     ("ray", 0, "gcs_server.out"), ("ray", 0, "dashboard.log"),
                     ("node", 1, ""), ("ray", 1, "raylet.out"), ("ray", 1, "raylet.err"),
                     ("ray", 1, "python-core-worker-01.log")]
    ray = [s for s in log_sources(shoal_home, records, run.name, ray=True) if s.kind == "ray"]
    assert ray[0].label == "[node 0 ray raylet.out attempt 0]"


def test_shoal_logs_node_prints_the_launcher_then_the_raylet(
        shoal_home: Path, records: Records, capsys: pytest.CaptureFixture[str]) -> None:
    run = ray_run(records, shoal_home)
    folder = shoal_home / "runs" / run.name / "logs" / "gang" / "a0.0" / "r0" / "ray-node1"
    assert main(["logs", run.name, "--node", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "==> a0 attempt 0 restart 0 node 1 launcher <==",
        "shoal-node 1: Ray workers node",
        f"==> a0 attempt 0 restart 0 node 1 ray raylet.out ({folder / 'raylet.out'}) <==",
        "worker raylet up",
        f"==> a0 attempt 0 restart 0 node 1 ray raylet.err ({folder / 'raylet.err'}) <==",
        "worker raylet warned",
        f"==> a0 attempt 0 restart 0 node 1: Ray's other logs, in {folder} <==",
        f"python-core-worker-01.log  {len(RAY_LOGS[1]['python-core-worker-01.log'])} B"]
    assert main(["logs", run.name, "--node", "0"]) == 0
    head = capsys.readouterr().out
    assert "the driver says hi" in head and "gcs listening" in head
    assert "dashboard.log" in head and "dashboard on 8265" not in head  # listed, not printed
    # a search reads every file, the listed ones too
    assert main(["logs", run.name, "--node", "0", "--grep", "8265"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["dashboard on 8265"]


def test_a_node_that_is_not_there_names_those_that_are(
        shoal_home: Path, records: Records, capsys: pytest.CaptureFixture[str]) -> None:
    run = ray_run(records, shoal_home)
    assert main(["logs", run.name, "--node", "7"]) != 0
    err = capsys.readouterr().err
    assert "--node=7" in err and "use one of 0, 1" in err, err
