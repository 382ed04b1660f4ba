"""The pretrain example's data step: a cold run against a cache hit, and its tokenizer's
throughput with a pool of 2 processes against 1.

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/data_step.py

(1) Cold vs cached: ``shoal run examples/pretrain/pipeline.py prepare_data`` with a fresh
``SHOAL_HOME`` (nothing cached: the tokenizer is trained, the corpus tokenized, the shards
written and stored), then the same command again with the same ``SHOAL_HOME``, where the
task's ``cache="auto"`` answers from the first run's outputs. Wall time of each ``shoal run``,
and the ratio. The second run must say it was a cache hit, or the round fails.

(2) Tokenization: ``corpus.tokenize`` of the example's training files with ``workers=2``
against ``workers=1``, each in its own child process (the call timed, not the interpreter's
start; the pool's start-up is part of the call), on one tokenizer that ``corpus.train_tokenizer``
trains first. Tokens/s, and the ratio; both runs must produce the same tokens. The goal: ≥ 1.6x
on 2 cores. ``TOKENIZERS_PARALLELISM=false``, as the example's data environment sets, so the
1-worker run is one core.

Each round does (1) then (2), the order of the two worker counts alternating from round to
round (``--rounds``); medians (min–max). ``--max-files`` tokenizes only the first files of the
corpus (default: all of it, as the example does). Writes
``benchmarks/results/<date>-cpu<N>-data-step.md``; about 1 minute on 2 quiet CPUs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from _common import (  # benchmarks/_common.py, next to this script
    REPO,
    CpuMeter,
    child_env,
    headline,
    ncpu,
    run_logged,
    run_marked,
    shoal_cli,
)
from _report import (  # benchmarks/_report.py, next to this script
    Frame,
    attempt,
    closing_sections,
    machine_line,
    print_tables,
    spread,
    table,
    write_results,
)

EXAMPLE = REPO / "examples" / "pretrain"
PIPELINE = EXAMPLE / "pipeline.py"
MARK = "DATA-STEP-RESULT "
GOAL_SPEEDUP = 1.6  # the goal: 2 tokenizing processes ≥ 1.6x one, on 2 cores
SECTION = "(d) data step"
VAL_EVERY = 20  # the example's default split


# ---------------------------------------------------------------------------------------------
# The measuring children: one tokenizer, then one timed corpus.tokenize call each.
# ---------------------------------------------------------------------------------------------

def _files(max_files: int) -> list[Path]:
    sys.path.insert(0, str(EXAMPLE))
    import corpus

    train: list[Path] = corpus.split(corpus.corpus_files(max_files), VAL_EVERY)[0]
    return train


def child_tokenizer(out: Path, max_files: int) -> dict[str, Any]:
    files = _files(max_files)
    import corpus

    t = time.perf_counter()
    corpus.train_tokenizer(files, 4096, out)
    return {"seconds": time.perf_counter() - t, "files": len(files),
            "bytes": sum(f.stat().st_size for f in files)}


def child_tokenize(tokenizer: Path, workers: int, max_files: int) -> dict[str, Any]:
    files = _files(max_files)
    import corpus

    t = time.perf_counter()
    tokens = corpus.tokenize(tokenizer, [files], workers)[0]
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "tokens": len(tokens),
            "sha256": hashlib.sha256(tokens.tobytes()).hexdigest()}


# ---------------------------------------------------------------------------------------------
# One measured run of each kind.
# ---------------------------------------------------------------------------------------------

def env() -> dict[str, str]:
    return child_env(TOKENIZERS_PARALLELISM="false")


def cold_and_cached(args: argparse.Namespace) -> dict[str, float]:
    """Both ``shoal run``s of one round, in one fresh SHOAL_HOME."""
    home = Path(tempfile.mkdtemp(prefix="shoal-bench-data-"))
    try:
        cmd = [*shoal_cli(), "run", str(PIPELINE), "prepare_data"]
        if args.max_files:
            cmd += ["--max-files", str(args.max_files)]
        out: dict[str, float] = {}
        for kind in ("cold", "cached"):
            log = home / f"{kind}.log"
            meter = CpuMeter()
            out[kind] = run_logged([cmd], [log], env=child_env(SHOAL_HOME=str(home)),
                                   timeout=args.timeout)
            out[f"{kind} others"] = meter.others_percent()
            hit = "cache hit" in log.read_text(errors="replace")
            if hit != (kind == "cached"):
                raise RuntimeError(f"the {kind} run was {'' if hit else 'not '}a cache hit:\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
    except RuntimeError:
        print(f"  (logs of the failed run kept in {home})", flush=True)
        raise
    shutil.rmtree(home, ignore_errors=True)
    return out


def tokenize(tokenizer: Path, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    meter = CpuMeter()
    got = run_marked([sys.executable, __file__, "--child", "tokenize", "--tokenizer",
                      str(tokenizer), "--workers", str(workers), "--max-files",
                      str(args.max_files)], MARK, env=env(), timeout=args.timeout,
                     what=f"corpus.tokenize with {workers} worker(s)")
    return {**got, "others": meter.others_percent()}


# ---------------------------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the median is kept")
    ap.add_argument("--max-files", type=int, default=0,
                    help="only the first N corpus files (0: the whole corpus, as the example)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument("--child", choices=("tokenizer", "tokenize"), help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "tokenizer":
        print(MARK + json.dumps(child_tokenizer(args.tokenizer, args.max_files)), flush=True)
        return
    if args.child == "tokenize":
        print(MARK + json.dumps(child_tokenize(args.tokenizer, args.workers, args.max_files)),
              flush=True)
        return

    frame = Frame.start("data_step.py")
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-tokenizer-"))
    cache: list[dict[str, float]] = []
    tok: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    failures: list[str] = []
    try:
        print("training the tokenizer, once", flush=True)
        tokenizer = work / "tokenizer.json"
        trained = run_marked([sys.executable, __file__, "--child", "tokenizer", "--tokenizer",
                              str(tokenizer), "--max-files", str(args.max_files)], MARK,
                             env=env(), timeout=args.timeout, what="train_tokenizer")
        for i in range(args.rounds):
            print(f"round {i + 1}/{args.rounds}", flush=True)
            both = attempt("prepare_data", lambda: cold_and_cached(args))
            if isinstance(both, str):
                failures.append(f"prepare_data: {both}")
            else:
                cache.append(both)
                print(f"  prepare_data: cold {both['cold']:.2f} s, cached {both['cached']:.2f} s",
                      flush=True)
            for workers in ((1, 2) if i % 2 == 0 else (2, 1)):
                label = f"tokenize, {workers} worker(s)"
                one = attempt(label, partial(tokenize, tokenizer, workers, args))
                if isinstance(one, str):
                    failures.append(f"{label}: {one}")
                else:
                    tok[workers].append(one)
                    print(f"  {label}: {one['tokens']:,} tokens in {one['seconds']:.2f} s",
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frame.stop()

    goal_lines: list[str] = []
    cache_rows = cache_table(cache, args.rounds, goal_lines)
    tok_rows = tokenize_table(tok, args.rounds, goal_lines, failures)
    print_tables({"(1) prepare_data, cold vs cache hit": cache_rows,
                  "(2) corpus.tokenize": tok_rows})
    frame.print_outcome(goal_lines, failures)
    if not args.no_write:
        write_report(frame, args, trained, cache_rows, tok_rows,
                     closing_sections(goal_lines, failures))


def cache_table(cache: list[dict[str, float]], rounds: int, goal_lines: list[str]) -> list[str]:
    """(1)'s rows; its goal line (and headline) into ``goal_lines``."""
    cache_rows = table(["run", "runs ok", "wall s (min–max)", "vs cold",
                        "CPU used by others, % (worst run)"])
    if cache:
        cold = statistics.median(c["cold"] for c in cache)
        cached = statistics.median(c["cached"] for c in cache)
        for kind, value in (("cold", cold), ("cached", cached)):
            cache_rows.append(f"| {kind} | {len(cache)}/{rounds} | "
                              f"{spread([c[kind] for c in cache])} | {value / cold:.3f}x | "
                              f"{max(c[f'{kind} others'] for c in cache):.0f} |")
        goal_lines.append(f"prepare_data: cold {cold:.2f} s, cache hit {cached:.2f} s: the "
                          f"cache hit takes {cached / cold:.1%} of a cold run "
                          f"({cold / cached:.0f}x faster; reported, no goal).")
        headline(SECTION, "prepare_data wall time, cold / cache hit",
                 f"{cold / cached:.0f}x ({cold:.1f} s vs {cached:.2f} s)")
    return cache_rows


def tokenize_table(tok: dict[int, list[dict[str, Any]]], rounds: int, goal_lines: list[str],
                   failures: list[str]) -> list[str]:
    """(2)'s rows; its goal line (and headline) into ``goal_lines``, different tokens from
    the two worker counts into ``failures``."""
    tok_rows = table(["workers", "runs ok", "tokens", "seconds (min–max)", "tokens/s (min–max)",
                      "vs 1 worker", "CPU used by others, % (worst run)"])
    rates = {w: [r["tokens"] / r["seconds"] for r in got] for w, got in tok.items()}
    for w, got in tok.items():
        if not got:
            continue
        vs = statistics.median(rates[w]) / statistics.median(rates[1]) if rates[1] else None
        tok_rows.append(f"| {w} | {len(got)}/{rounds} | {got[0]['tokens']:,} | "
                        f"{spread([r['seconds'] for r in got])} | {spread(rates[w], '{:,.0f}')} | "
                        f"{'-' if vs is None else f'{vs:.2f}x'} | "
                        f"{max(r['others'] for r in got):.0f} |")
    if rates[1] and rates[2]:
        digests = {r["sha256"] for got in tok.values() for r in got}
        if len(digests) != 1:
            failures.append(f"tokenize: the runs produced {len(digests)} different token arrays")
        speedup = statistics.median(rates[2]) / statistics.median(rates[1])
        goal_lines.append(f"corpus.tokenize: 2 workers {speedup:.2f}x 1 worker's tokens/s; goal "
                          f"≥ {GOAL_SPEEDUP}x: {'met' if speedup >= GOAL_SPEEDUP else 'NOT met'}"
                          f"{'' if len(digests) == 1 else ' (but their tokens differ!)'}.")
        headline(SECTION, "corpus.tokenize, 2 workers / 1 worker, tokens/s", f"{speedup:.2f}x",
                 f"≥ {GOAL_SPEEDUP}x", speedup >= GOAL_SPEEDUP and len(digests) == 1)
    return tok_rows


def write_report(frame: Frame, args: argparse.Namespace, trained: dict[str, Any],
                 cache_rows: list[str], tok_rows: list[str], closing: list[str]) -> None:
    corpus_note = "the whole corpus" if not args.max_files else \
        f"the first {args.max_files} corpus files"
    machine = machine_line(
        f". {args.rounds} rounds, each (1) then (2); median (min–max). Whole run "
        f"{frame.elapsed:.0f} s; {frame.load_note()}.")
    write_results("data-step", "Data step", command=frame.command, machine=machine, body=[
        "## (1) `shoal run examples/pretrain/pipeline.py prepare_data`: cold, then a cache hit",
        "",
        *cache_rows, "",
        "Wall time of each `shoal run`, from start to exit. cold: a fresh `SHOAL_HOME`: the "
        "tokenizer is trained, the corpus tokenized by a pool of "
        f"{ncpu()} processes, the shards written and stored. cached: the same command again "
        "with the same `SHOAL_HOME`; the task's `cache=\"auto\"` answers from the first run's "
        f"outputs (each such run said `cache hit`). Corpus: {corpus_note}.", "",
        "## (2) `corpus.tokenize`: 2 processes against 1", "",
        *tok_rows, "",
        f"The example's training files ({trained['files']} files, "
        f"{trained['bytes'] / 2**20:.1f} MiB of Python source), one tokenizer trained first "
        f"({trained['seconds']:.1f} s). Each call in its own child process, the call alone "
        "timed (the pool's start-up included); the worker counts' order alternates round by "
        "round; `TOKENIZERS_PARALLELISM=false`.", "",
        *closing,
    ])


if __name__ == "__main__":
    main()
