"""The data: small pictures of one coloured shape each, drawn here with numpy, and their captions.

Every picture is ``SIZE`` x ``SIZE`` RGB: one shape (circle, square, triangle or cross), of one
of six colours, small or large, in one of five places, its centre jittered by a few pixels,
its colour and the background noisy. Its caption names the four attributes::

    a small red circle at the top left
    a large cyan cross in the centre

240 combinations, and every picture different, so the held-out pictures are not in training
(their combinations are). Nothing is downloaded: ``render`` draws ``count`` pictures from a
generator seeded by ``seed``, the same on every machine.

The tokenizer is one token per word (the vocabulary below) and three special tokens. The data
task writes a folder::

    train.npz   images uint8 (N, SIZE, SIZE, 3), tokens int64 (N, MAX_LEN)
    val.npz     the held-out pictures, the same layout
    text.npz    captions alone (tokens), for pretraining the language model
    meta.json   counts, the vocabulary, the sizes
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SIZE = 32  # pixels a side
COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (50, 80, 230),
           "yellow": (230, 210, 40), "magenta": (210, 50, 200), "cyan": (40, 200, 210)}
SHAPES = ("circle", "square", "triangle", "cross")
SIZES = {"small": 5, "large": 8}  # half the shape's width, in pixels
PLACES = {"top left": (9, 9), "top right": (9, 23), "bottom left": (23, 9),
          "bottom right": (23, 23), "centre": (16, 16)}  # (row, column) of the centre
ATTRIBUTES = ("size", "colour", "shape", "place")

PAD, BOS, EOS = 0, 1, 2
WORDS = ("<pad>", "<bos>", "<eos>", "a", "at", "in", "the", "top", "bottom", "left", "right",
         "centre", *SIZES, *COLOURS, *SHAPES)
WORD_ID = {w: i for i, w in enumerate(WORDS)}
MAX_LEN = 10  # <bos> a large yellow triangle at the bottom right <eos>


@dataclass(frozen=True)
class Meta:
    train: int
    val: int
    text: int
    image_size: int
    max_len: int
    vocab: list[str]


def caption(size: str, colour: str, shape: str, place: str) -> str:
    where = "in the centre" if place == "centre" else f"at the {place}"
    return f"a {size} {colour} {shape} {where}"


def encode(text: str) -> list[int]:
    """``<bos>``, the words' ids, ``<eos>``, padded to ``MAX_LEN``."""
    ids = [BOS, *(WORD_ID[w] for w in text.split()), EOS]
    return ids + [PAD] * (MAX_LEN - len(ids))


def decode(ids: list[int]) -> str:
    """The words of ``ids`` up to the first ``<eos>``, specials left out."""
    words = []
    for i in ids:
        if i == EOS:
            break
        if i > EOS:
            words.append(WORDS[i])
    return " ".join(words)


def attributes(text: str) -> dict[str, str | None]:
    """Size, colour, shape and place a caption names (None for one it does not)."""
    words = text.split()
    place = next((p for p in PLACES if f" {p}" in f" {text}"), None)
    return {"size": next((w for w in words if w in SIZES), None),
            "colour": next((w for w in words if w in COLOURS), None),
            "shape": next((w for w in words if w in SHAPES), None),
            "place": place}


def draw(size: str, colour: str, shape: str, place: str, rng: np.random.Generator
         ) -> np.ndarray:
    """One picture, uint8 (SIZE, SIZE, 3)."""
    img = rng.normal(30, 12, (SIZE, SIZE, 3))
    r0, c0 = (v + int(rng.integers(-2, 3)) for v in PLACES[place])
    h = SIZES[size]
    rows, cols = np.mgrid[0:SIZE, 0:SIZE]
    dr, dc = rows - r0, cols - c0
    if shape == "circle":
        mask = dr ** 2 + dc ** 2 <= h ** 2
    elif shape == "square":
        mask = (abs(dr) <= h - 1) & (abs(dc) <= h - 1)
    elif shape == "triangle":  # apex up: wider towards its base
        mask = (dr >= -h) & (dr <= h) & (abs(dc) <= (dr + h) / 2)
    else:  # cross
        arm = max(1, h // 3)
        mask = ((abs(dr) <= h) & (abs(dc) <= arm)) | ((abs(dc) <= h) & (abs(dr) <= arm))
    img[mask] = np.array(COLOURS[colour]) + rng.normal(0, 12, 3)
    return np.clip(img, 0, 255).astype(np.uint8)


def render(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random pictures and their captions' tokens."""
    rng = np.random.default_rng(seed)
    images = np.empty((count, SIZE, SIZE, 3), np.uint8)
    tokens = np.empty((count, MAX_LEN), np.int64)
    for i in range(count):
        pick = (str(rng.choice(list(SIZES))), str(rng.choice(list(COLOURS))),
                str(rng.choice(SHAPES)), str(rng.choice(list(PLACES))))
        images[i] = draw(*pick, rng)
        tokens[i] = encode(caption(*pick))
    return images, tokens


def build(out: Path, *, train: int, val: int, text: int, seed: int = 0) -> Meta:
    """Write the data folder; its meta."""
    out.mkdir(parents=True, exist_ok=True)
    for name, count, part in (("train", train, 1), ("val", val, 2)):
        images, tokens = render(count, seed=seed * 10 + part)
        np.savez(out / f"{name}.npz", images=images, tokens=tokens)
    # The language model's own corpus: captions without their pictures.
    rng = np.random.default_rng(seed * 10 + 3)
    captions = [encode(caption(str(rng.choice(list(SIZES))), str(rng.choice(list(COLOURS))),
                               str(rng.choice(SHAPES)), str(rng.choice(list(PLACES)))))
                for _ in range(text)]
    np.savez(out / "text.npz", tokens=np.array(captions, np.int64))
    meta = Meta(train=train, val=val, text=text, image_size=SIZE, max_len=MAX_LEN,
                vocab=list(WORDS))
    (out / "meta.json").write_text(json.dumps(asdict(meta), indent=1))
    return meta


def load(folder: Path, split: str) -> dict[str, np.ndarray]:
    """``train``, ``val`` or ``text`` of a data folder, as arrays."""
    with np.load(folder / f"{split}.npz") as f:
        return {k: f[k] for k in f.files}
