"""The corpus, the tokenizer and the token shards: plain functions the data task calls.

The corpus is the Python standard library's own source, which every machine that runs this
example has (the interpreter's ``Lib`` folder, test suites and third-party packages left out).
Files, not lines, are split between training and validation, so no held-out text was seen in
training. A byte-level BPE tokenizer (Hugging Face ``tokenizers``) is trained on the training
files only; the files are then tokenized by a pool of processes, each taking a contiguous run of
files, and written as flat little-endian ``uint16`` arrays (the vocabulary stays below 65,536),
one ``<|endoftext|>`` between documents.

Layout of the folder the data task returns::

    tokenizer.json        the trained tokenizer
    train_000.bin ...     training tokens, uint16, at most ``shard_tokens`` per shard
    val.bin               held-out tokens
    meta.json             counts, vocabulary size, the corpus it came from
"""

from __future__ import annotations

import json
import os
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

EOT = "<|endoftext|>"
# Left out: tests, third-party packages, and folders that are mostly data tables, not code.
_SKIPPED = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__",
            "encodings", "pydoc_data"}


def corpus_files(limit: int = 0) -> list[Path]:
    """The standard library's ``.py`` files, in a fixed order (``limit`` > 0 keeps the first)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py")
                   if not _SKIPPED.intersection(p.relative_to(root).parts))
    return files[:limit] if limit > 0 else files


def split(files: list[Path], val_every: int) -> tuple[list[Path], list[Path]]:
    """Every ``val_every``-th file goes to validation, the rest to training."""
    val = files[val_every // 2::val_every]
    held = set(val)
    return [f for f in files if f not in held], val


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(files: list[Path], vocab_size: int, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if not 256 < vocab_size <= 65536:
        raise ValueError(f"vocab_size={vocab_size}: must be in 257..65536 (tokens are stored as "
                         "uint16 and the byte alphabet takes 256)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((read(f) for f in files), trainer=trainer)
    tok.save(str(out))


_worker_tokenizer: Any = None


def _load_tokenizer(tokenizer_json: str) -> None:
    """Pool initializer: each worker loads the tokenizer once."""
    global _worker_tokenizer
    from tokenizers import Tokenizer

    _worker_tokenizer = Tokenizer.from_file(tokenizer_json)


def _encode(files: list[str]) -> np.ndarray:
    """One run of files: their tokens, each document followed by ``<|endoftext|>``."""
    tok = _worker_tokenizer
    eot = tok.token_to_id(EOT)
    ids: list[int] = []
    for f in files:
        ids.extend(tok.encode(read(Path(f))).ids)
        ids.append(eot)
    return np.asarray(ids, dtype=np.uint16)


def _runs(files: list[Path], parts: int) -> list[list[str]]:
    """``files`` cut, in order, into at most ``parts`` runs of about equal size in bytes."""
    sizes = [f.stat().st_size for f in files]
    target = sum(sizes) / max(1, parts)
    runs: list[list[str]] = [[]]
    filled = 0.0
    for f, size in zip(files, sizes, strict=True):
        if filled >= target and len(runs) < parts:
            runs.append([])
            filled = 0.0
        runs[-1].append(str(f))
        filled += size
    return [r for r in runs if r]


def tokenize(tokenizer_json: Path, splits: list[list[Path]], workers: int) -> list[np.ndarray]:
    """Each split's tokens, in file order, encoded by ``workers`` processes (1: this one).

    Every split is cut into runs of about equal size, two per worker, so one slow run does not
    hold the others up for long; all runs go through one pool (processes, not threads: each
    encodes on its own core), whose workers load the tokenizer once. The pool forks: the
    tokenizer's own thread pool is off in this process (TOKENIZERS_PARALLELISM=false).
    """
    if workers <= 1:
        _load_tokenizer(str(tokenizer_json))
        return [_encode([str(f) for f in files]) for files in splits]
    runs = [_runs(files, workers * 2) for files in splits]
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before the fork, in case a caller did not
    with ProcessPoolExecutor(workers, mp_context=get_context("fork"),
                             initializer=_load_tokenizer,
                             initargs=(str(tokenizer_json),)) as pool:
        pieces = list(pool.map(_encode, [r for split in runs for r in split]))
    out, i = [], 0
    for split in runs:
        out.append(np.concatenate(pieces[i:i + len(split)]) if split
                   else np.zeros(0, dtype=np.uint16))
        i += len(split)
    return out


@dataclass
class Meta:
    corpus: str
    files_train: int
    files_val: int
    vocab_size: int
    train_tokens: int
    val_tokens: int
    shards: int
    workers: int
    tokenize_seconds: float


def write_shards(tokens: np.ndarray, out: Path, shard_tokens: int) -> int:
    """``train_NNN.bin`` files of at most ``shard_tokens`` tokens; how many were written."""
    count = max(1, -(-len(tokens) // shard_tokens))
    for i in range(count):
        tokens[i * shard_tokens:(i + 1) * shard_tokens].tofile(out / f"train_{i:03d}.bin")
    return count


def build(out: Path, *, vocab_size: int, shard_tokens: int, val_every: int, workers: int,
          max_files: int = 0) -> Meta:
    """Everything above, into ``out``: tokenizer, training shards, validation tokens, meta."""
    out.mkdir(parents=True, exist_ok=True)
    train_files, val_files = split(corpus_files(max_files), val_every)
    tokenizer_json = out / "tokenizer.json"
    train_tokenizer(train_files, vocab_size, tokenizer_json)
    t0 = time.perf_counter()
    train, val = tokenize(tokenizer_json, [train_files, val_files], workers)
    seconds = time.perf_counter() - t0
    shards = write_shards(train, out, shard_tokens)
    val.tofile(out / "val.bin")
    meta = Meta(corpus=sysconfig.get_paths()["stdlib"], files_train=len(train_files),
                files_val=len(val_files), vocab_size=vocab_size, train_tokens=len(train),
                val_tokens=len(val), shards=shards, workers=workers,
                tokenize_seconds=round(seconds, 3))
    (out / "meta.json").write_text(json.dumps(asdict(meta), indent=2))
    return meta


def load_tokens(folder: Path, split_name: str) -> np.ndarray:
    """The training tokens (all shards, memory-mapped and joined) or the validation tokens."""
    if split_name == "val":
        return np.memmap(folder / "val.bin", dtype=np.uint16, mode="r")
    shards = sorted(folder.glob("train_*.bin"))
    if not shards:
        raise FileNotFoundError(f"no train_*.bin shards in {folder}")
    maps = [np.memmap(s, dtype=np.uint16, mode="r") for s in shards]
    return maps[0] if len(maps) == 1 else np.concatenate(maps)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
