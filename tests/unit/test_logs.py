"""A run's log files found and read in whole lines: made-up run folders and real records."""

from __future__ import annotations

from pathlib import Path

import pytest

from shoal._storage.log_lines import LineReader, LogFollower
from shoal._storage.logs import LINE_LIMIT, LogSource, cut_line, log_sources, read_chunk
from shoal._storage.records import Records
from shoal.cli.main import main

RUN = "r-logs"


@pytest.fixture
def records(shoal_home: Path) -> Records:
    shoal_home.mkdir(parents=True, exist_ok=True)
    rec = Records(shoal_home / "shoal.db")
    rec.create_run(name=RUN, task="main", code_file="p.py", engine="local", store="file:///s",
                   inputs={})
    return rec


def _plain(home: Path, rec: Records, action: str, attempt: int, text: str | None) -> Path:
    if rec.find_action(RUN, action) is None:
        rec.create_action(run=RUN, action_id=action, task=f"t.{action}", env="t", inputs={})
    log = home / "runs" / RUN / "logs" / f"{action}.{attempt}.log"
    rec.start_attempt(RUN, action, attempt, pid=None, log_path=log)
    if text is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(text)
    return log


def _gang(home: Path, rec: Records, action: str, attempt: int, restart: int,
          nnodes: int, nproc: int, *, event: bool = True, ranks: list[int] | None = None,
          **extra: object) -> Path:
    """A gang attempt's folder as the local engine leaves it: node and rank logs."""
    if rec.find_action(RUN, action) is None:
        rec.create_action(run=RUN, action_id=action, task="g.train", env="g", inputs={})
    if restart == 0:
        rec.start_attempt(RUN, action, attempt, pid=None,
                          log_path=home / "runs" / RUN / "logs" / f"{action}.{attempt}.log")
    folder = home / "runs" / RUN / "logs" / "gang" / f"{action}.{attempt}" / f"r{restart}"
    folder.mkdir(parents=True)
    for n in range(nnodes):
        (folder / f"node{n}.log").write_text(f"launcher {n}\n")
    for r in range(nnodes * nproc) if ranks is None else ranks:
        (folder / f"rank{r}.log").write_text(f"rank {r} says hi\n")
    data: dict[str, object] = {"restart": restart, "pids": list(range(nnodes))}
    if event:
        data |= {"nnodes": nnodes, "nproc_per_node": nproc} | extra
    rec.add_event(RUN, "gang_started", "g.train: gang started", action_id=action, data=data)
    return folder


def _who(sources: list[LogSource]) -> list[tuple[object, ...]]:
    return [(s.action, s.attempt, s.restart, s.kind, s.node, s.rank) for s in sources]


# --- finding the files ------------------------------------------------------------------------
def test_plain_calls_and_a_restarted_gang_in_order(shoal_home: Path, records: Records) -> None:
    _plain(shoal_home, records, "a0", 0, "root\n")
    _gang(shoal_home, records, "a0.1", 0, 0, nnodes=2, nproc=2)
    _gang(shoal_home, records, "a0.1", 0, 1, nnodes=2, nproc=2)
    _plain(shoal_home, records, "a0.2", 0, None)  # started, wrote nothing yet
    sources = log_sources(shoal_home, records, RUN)
    expected: list[tuple[object, ...]] = [("a0", 0, None, "task", None, None)]
    for restart in (0, 1):
        for node in (0, 1):
            expected += [("a0.1", 0, restart, "rank", node, node * 2 + local) for local in (0, 1)]
            expected.append(("a0.1", 0, restart, "node", node, None))
    expected.append(("a0.2", 0, None, "task", None, None))
    assert _who(sources) == expected
    assert sources[0].path.read_text() == "root\n" and sources[0].label == ""
    assert sources[0].task == "t.a0" and sources[1].task == "g.train"
    assert sources[4].label == "[node 1 rank 2 attempt 0]"
    assert sources[6].label == "[node 1 launcher attempt 0]"
    assert sources[7].label == "[node 0 rank 0 attempt 0 restart 1]"
    assert sources[7].tag == "a0.1 [node 0 rank 0 attempt 0 restart 1]"
    assert sources[-1].tag == "a0.2 [attempt 0]"


def test_the_node_of_a_rank_comes_from_the_event_before_all_rank_files_exist(
        shoal_home: Path, records: Records) -> None:
    _gang(shoal_home, records, "a0", 0, 0, nnodes=2, nproc=4, ranks=[2])
    (rank,) = [s for s in log_sources(shoal_home, records, RUN) if s.kind == "rank"]
    # From the files alone, 2 nodes and ranks up to 2 would mean 2 ranks a node: node 1.
    assert (rank.rank, rank.node) == (2, 0)


def test_without_the_topology_in_the_event_node_files_are_counted(
        shoal_home: Path, records: Records) -> None:
    _gang(shoal_home, records, "a0", 0, 0, nnodes=3, nproc=2, event=False)
    ranks = [s for s in log_sources(shoal_home, records, RUN) if s.kind == "rank"]
    assert [(s.rank, s.node) for s in ranks] == [(r, r // 2) for r in range(6)]


def test_a_gang_attempt_retried_gets_its_own_sources(shoal_home: Path, records: Records) -> None:
    _gang(shoal_home, records, "a0", 0, 0, nnodes=1, nproc=1)
    _gang(shoal_home, records, "a0", 1, 0, nnodes=1, nproc=1)
    assert _who(log_sources(shoal_home, records, RUN)) == [
        ("a0", 0, 0, "rank", 0, 0), ("a0", 0, 0, "node", 0, None),
        ("a0", 1, 0, "rank", 0, 0), ("a0", 1, 0, "node", 0, None)]


# --- reading ---------------------------------------------------------------------------------
def test_read_chunk_returns_whole_lines_and_the_next_offset(tmp_path: Path) -> None:
    f = tmp_path / "x.log"
    assert read_chunk(f, 7) == (b"", 7)  # not there yet
    f.write_bytes(b"one\ntwo\nthr")
    assert read_chunk(f, 0) == (b"one\ntwo\n", 8)
    assert read_chunk(f, 8) == (b"", 8)  # "thr" is still being written
    assert read_chunk(f, 8, final=True) == (b"thr", 11)
    assert read_chunk(f, 0, max_bytes=6) == (b"one\n", 4)
    f.write_bytes(b"x" * 10 + b"\n")
    assert read_chunk(f, 0, max_bytes=4) == (b"xxxx", 4)  # a piece of a too-long line


def test_cut_line_says_how_many_bytes_were_cut() -> None:
    assert cut_line("short", 10) == "short"
    assert cut_line("x" * 10, 10) == "x" * 10
    assert cut_line("x" * 25, 10) == "x" * 10 + " ...[15 bytes cut; `shoal logs --full` prints " \
                                                "the whole line]"
    # never half a character: "é" is 2 bytes, so 5 of them do not fit in 9
    assert cut_line("é" * 10, 9).startswith("é" * 4 + " ...[12 bytes cut")


def test_a_huge_line_is_cut_in_the_view_and_whole_on_disk(tmp_path: Path) -> None:
    f = tmp_path / "x.log"
    huge = "y" * (5 << 20)
    f.write_text(f"before\n{huge}\nafter\n")
    reader = LineReader(f)
    lines = list(reader.lines())
    assert lines[0] == "before" and lines[2] == "after"
    assert lines[1] == "y" * LINE_LIMIT + f" ...[{(5 << 20) - LINE_LIMIT} bytes cut; " \
                                         "`shoal logs --full` prints the whole line]"
    assert len(reader._pending) == 0
    assert f.read_text().splitlines()[1] == huge
    assert list(LineReader(f, None).lines())[1] == huge


def test_a_line_being_written_comes_once_it_is_whole(tmp_path: Path) -> None:
    f = tmp_path / "x.log"
    reader = LineReader(f, limit=8)
    assert list(reader.lines()) == []
    with open(f, "ab") as w:
        w.write(b"a\nlong")
        w.flush()
        assert list(reader.lines()) == ["a"]
        w.write(b"er than eight")
        w.flush()
        assert list(reader.lines()) == []
        w.write(b"\nlast")
        w.flush()
        assert list(reader.lines()) == ["longer t ...[9 bytes cut; `shoal logs --full` "
                                        "prints the whole line]"]
    assert list(reader.lines(final=True)) == ["last"]
    assert list(reader.lines(final=True)) == []


def test_the_follower_finds_new_files_and_keeps_only_what_is_asked(
        shoal_home: Path, records: Records) -> None:
    folder = _gang(shoal_home, records, "a0", 0, 0, nnodes=1, nproc=2)
    follower = LogFollower(shoal_home, records, RUN, keep=lambda s: s.kind == "rank")
    assert [(s.rank, line) for s, line in follower.poll()] == [(0, "rank 0 says hi"),
                                                                (1, "rank 1 says hi")]
    with open(folder / "rank1.log", "a") as w:
        w.write("more\npart")
    assert [(s.rank, line) for s, line in follower.poll()] == [(1, "more")]
    _gang(shoal_home, records, "a0", 0, 1, nnodes=1, nproc=2)  # the gang restarted
    got = [(s.restart, s.rank, line) for s, line in follower.poll(final=True)]
    assert got == [(0, 1, "part"), (1, 0, "rank 0 says hi"), (1, 1, "rank 1 says hi")]
    assert list(follower.poll(final=True)) == []


# --- the CLI on made-up folders ---------------------------------------------------------------
def test_logs_of_a_gang_are_labelled_and_grouped(shoal_home: Path, records: Records,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _plain(shoal_home, records, "a0", 0, "plain line\n")
    _gang(shoal_home, records, "a0.1", 0, 0, nnodes=2, nproc=1)
    _gang(shoal_home, records, "a0.1", 0, 1, nnodes=2, nproc=1)
    assert main(["logs", RUN]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "==> a0 t.a0 attempt 0 (running) <==",
        "plain line",
        "==> a0.1 g.train attempt 0 (running) <==",
        "[node 0 rank 0 attempt 0] rank 0 says hi",
        "[node 0 launcher attempt 0] launcher 0",
        "[node 1 rank 1 attempt 0] rank 1 says hi",
        "[node 1 launcher attempt 0] launcher 1",
        "[node 0 rank 0 attempt 0 restart 1] rank 0 says hi",
        "[node 0 launcher attempt 0 restart 1] launcher 0",
        "[node 1 rank 1 attempt 0 restart 1] rank 1 says hi",
        "[node 1 launcher attempt 0 restart 1] launcher 1",
    ]
    assert main(["logs", RUN, "--grep", r"rank \d", "--attempt", "0", "--action", "a0.1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "==> a0.1 g.train attempt 0 (running) <==" and len(out) == 5
    assert main(["logs", RUN, "--rank", "1", "--grep", "hi"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "==> a0.1 attempt 0 restart 0 rank 1 <==", "rank 1 says hi",
        "==> a0.1 attempt 0 restart 1 rank 1 <==", "rank 1 says hi"]


def test_a_bad_pattern_is_a_usage_error_naming_it(shoal_home: Path, records: Records,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", RUN, "--grep", "loss("]) == 2
    err = capsys.readouterr().err
    assert "--grep='loss(': is not a Python regular expression (missing )" in err
    assert main(["logs", RUN, "--grep", "nowhere"]) == 1  # as grep: nothing matched
    assert "no line of run r-logs matches 'nowhere'" in capsys.readouterr().err


def test_full_prints_a_huge_line_whole(shoal_home: Path, records: Records,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    huge = "z" * (5 << 20)
    _plain(shoal_home, records, "a0", 0, f"{huge}\n")
    assert main(["logs", RUN]) == 0
    (_, cut) = capsys.readouterr().out.splitlines()
    assert cut.startswith("z" * LINE_LIMIT + f" ...[{len(huge) - LINE_LIMIT} bytes cut")
    assert main(["logs", RUN, "--grep", "^z", "--full"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == huge
    assert main(["logs", RUN, "--grep", "z$"]) == 0  # the match lies past the cut
    assert "bytes cut" in capsys.readouterr().out


def test_follow_of_an_ended_run_prints_everything_and_returns(
        shoal_home: Path, records: Records, capsys: pytest.CaptureFixture[str]) -> None:
    _plain(shoal_home, records, "a0", 0, "done\nno newline")
    _gang(shoal_home, records, "a0.1", 0, 0, nnodes=1, nproc=1)
    records.set_run_state(RUN, "succeeded")
    assert main(["logs", RUN, "-f"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "a0 [attempt 0] done", "a0 [attempt 0] no newline",
        "a0.1 [node 0 rank 0 attempt 0] rank 0 says hi",
        "a0.1 [node 0 launcher attempt 0] launcher 0"]


def test_follow_ends_when_the_driver_of_the_run_died(shoal_home: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from shoal.cli import logs_cmd

    never_a_pid = int(Path("/proc/sys/kernel/pid_max").read_text())  # pids stay below it
    shoal_home.mkdir(parents=True, exist_ok=True)
    rec = Records(shoal_home / "shoal.db")
    rec.create_run(name=RUN, task="main", code_file="p.py", engine="local", store="file:///s",
                   inputs={}, engine_pid=never_a_pid)
    rec.set_run_state(RUN, "running")
    _plain(shoal_home, rec, "a0", 0, "before the crash\n")
    monkeypatch.setattr(logs_cmd, "REAP_EVERY", 0.0)
    assert main(["logs", RUN, "--follow"]) == 0  # not forever: the run is found crashed
    assert capsys.readouterr().out == "a0 [attempt 0] before the crash\n"
    assert rec.get_run(RUN).state == "crashed"


def test_a_hang_diagnosis_adds_stacks_after_each_rank_log(shoal_home: Path,
                                                          records: Records) -> None:
    """stacks-rank<N>.txt right after rank N's log, hang.txt after the whole restart; the
    other files a diagnosis leaves (status, faulthandler's raw output) are not logs."""
    folder = _gang(shoal_home, records, "a0", 0, 0, nnodes=2, nproc=1)
    for r in (0, 1):
        (folder / f"stacks-rank{r}.txt").write_text(f"rank {r} stacks\n")
        (folder / f"rank{r}.status.json").write_text("{}")
        (folder / f"rank{r}.faulthandler.txt").write_text("raw\n")
    (folder / "hang.txt").write_text("rank 1 stopped answering\n")
    sources = log_sources(shoal_home, records, RUN)
    assert _who(sources) == [
        ("a0", 0, 0, "rank", 0, 0), ("a0", 0, 0, "stacks", 0, 0), ("a0", 0, 0, "node", 0, None),
        ("a0", 0, 0, "rank", 1, 1), ("a0", 0, 0, "stacks", 1, 1), ("a0", 0, 0, "node", 1, None),
        ("a0", 0, 0, "stacks", None, None)]
    assert sources[4].label == "[node 1 rank 1 stacks attempt 0]"
    assert sources[-1].label == "[hang diagnosis stacks attempt 0]"
    assert sources[-1].path.name == "hang.txt"


def test_shoal_logs_shows_a_ranks_stacks_with_its_log(shoal_home: Path, records: Records,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    folder = _gang(shoal_home, records, "a0", 0, 0, nnodes=2, nproc=1)
    (folder / "stacks-rank1.txt").write_text("Thread 4 (idle): \"MainThread\"\n    stuck\n")
    (folder / "hang.txt").write_text("rank 1 stopped answering\n")
    assert main(["logs", RUN]) == 0
    out = capsys.readouterr().out
    assert "[node 1 rank 1 stacks attempt 0]     stuck" in out
    assert "[hang diagnosis stacks attempt 0] rank 1 stopped answering" in out
    assert main(["logs", RUN, "--rank", "1"]) == 0
    out = capsys.readouterr().out
    assert "rank 1 stacks <==" in out and "    stuck" in out


# --- an elastic gang ------------------------------------------------------------------------
def _elastic(home: Path, rec: Records) -> None:
    """A 2-node × 1-rank elastic gang (1..2 nodes): node 1 lost, then back."""
    bounds = {"min_nnodes": 1, "max_nnodes": 2}
    _gang(home, rec, "a0", 0, 0, nnodes=2, nproc=1, cause="first_start", **bounds)
    rec.add_event(RUN, "gang_resized", "gang resized 2 -> 1 nodes: node 1 lost",
                  action_id="a0", data={"restart": 1, "from": 2, "to": 1, "cause": "node_lost",
                                        "nodes": [1], "reason": "node 1 lost"})
    _gang(home, rec, "a0", 0, 1, nnodes=1, nproc=1, cause="node_lost", **bounds)
    rec.add_event(RUN, "gang_resized", "gang resized 1 -> 2 nodes: node 1 back",
                  action_id="a0", data={"restart": 2, "from": 1, "to": 2, "cause": "grown",
                                        "nodes": [1], "reason": "node 1 back"})
    _gang(home, rec, "a0", 0, 2, nnodes=2, nproc=1, cause="grown", **bounds)


def test_an_elastic_gangs_labels_name_each_starts_world(shoal_home: Path, records: Records,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    _elastic(shoal_home, records)
    sources = log_sources(shoal_home, records, RUN)
    assert [(s.restart, s.rank, s.world) for s in sources if s.kind == "rank"] == [
        (0, 0, "2×1"), (0, 1, "2×1"), (1, 0, "1×1"), (2, 0, "2×1"), (2, 1, "2×1")]
    assert main(["logs", RUN]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "==> a0 g.train attempt 0 (running) <==",
        "[node 0 rank 0 attempt 0, world 2×1] rank 0 says hi",
        "[node 0 launcher attempt 0, world 2×1] launcher 0",
        "[node 1 rank 1 attempt 0, world 2×1] rank 1 says hi",
        "[node 1 launcher attempt 0, world 2×1] launcher 1",
        "[node 0 rank 0 attempt 0 restart 1, world 1×1] rank 0 says hi",
        "[node 0 launcher attempt 0 restart 1, world 1×1] launcher 0",
        "[node 0 rank 0 attempt 0 restart 2, world 2×1] rank 0 says hi",
        "[node 0 launcher attempt 0 restart 2, world 2×1] launcher 0",
        "[node 1 rank 1 attempt 0 restart 2, world 2×1] rank 1 says hi",
        "[node 1 launcher attempt 0 restart 2, world 2×1] launcher 1",
    ]
    assert main(["logs", RUN, "--rank", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "==> a0 attempt 0 restart 0 rank 1, world 2×1 <==", "rank 1 says hi",
        "==> a0 attempt 0 restart 2 rank 1, world 2×1 <==", "rank 1 says hi"]


def test_an_elastic_gang_that_kept_its_size_keeps_the_plain_labels(
        shoal_home: Path, records: Records) -> None:
    bounds = {"min_nnodes": 1, "max_nnodes": 2, "cause": "first_start"}
    _gang(shoal_home, records, "a0", 0, 0, nnodes=2, nproc=1, **bounds)
    _gang(shoal_home, records, "a0", 0, 1, nnodes=2, nproc=1, **bounds | {"cause": "restart"})
    labels = [s.label for s in log_sources(shoal_home, records, RUN) if s.kind == "rank"]
    assert labels == ["[node 0 rank 0 attempt 0]", "[node 1 rank 1 attempt 0]",
                      "[node 0 rank 0 attempt 0 restart 1]", "[node 1 rank 1 attempt 0 restart 1]"]


def test_each_start_places_its_ranks_with_its_own_topology(shoal_home: Path,
                                                           records: Records) -> None:
    """A start whose event is not recorded yet takes the call's ranks per node."""
    _gang(shoal_home, records, "a0", 0, 0, nnodes=2, nproc=2)
    _gang(shoal_home, records, "a0", 0, 1, nnodes=1, nproc=2, event=False, ranks=[0, 1])
    ranks = [s for s in log_sources(shoal_home, records, RUN) if s.kind == "rank"]
    assert [(s.restart, s.rank, s.node, s.per_node) for s in ranks] == [
        (0, 0, 0, 2), (0, 1, 0, 2), (0, 2, 1, 2), (0, 3, 1, 2), (1, 0, 0, None),
        (1, 1, 0, None)]
