"""A tiny vision-language model, written for this example: image encoder + projector + LM.

The layout of LLaVA-style models, small enough for a few CPU cores:

- ``ImageEncoder``: three small convolutions, each followed by a 2x2 max-pool, turn a 32 x 32
  picture into a 4 x 4 grid of features: 16 "image tokens", each with a learned position;
- ``Projector``: a two-layer MLP maps each image token into the language model's embedding
  space, and one more token, the picture's summary, is a linear map of the whole grid;
- ``CaptionLM``: a decoder-only transformer (pre-norm blocks, PyTorch's fused causal
  ``scaled_dot_product_attention``, output head tied to the token embedding). It is first
  pretrained on captions alone (text in, next word out: it learns the captions' language),
  then fine-tuned with the encoder and projector on (picture, caption) pairs.

The image tokens and the summary sit in front of the caption as a prefix that every word
attends to; the summary is also added to every word's embedding, which taught this small model
most shapes in 300 steps where attention to the prefix alone got fewer than half right
(the shape is the slowest of the four attributes to learn). Text positions
count from the caption's first word, with or without a picture in front, so what the LM
learned in pretraining still holds once a prefix is added.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class VLMConfig:
    vocab_size: int = 26
    max_len: int = 10  # caption tokens, <bos> and <eos> included
    image_size: int = 32
    channels: tuple[int, ...] = (32, 32, 64)  # the encoder's convolutions
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64


class ImageEncoder(nn.Module):
    """(B, H, W, 3) uint8 -> (B, (H/8)^2, channels[-1]): one feature vector per 8x8 patch."""

    def __init__(self, cfg: VLMConfig) -> None:
        super().__init__()
        # Small convolutions, each followed by a 2x2 max-pool: the pooling's tolerance of a
        # pixel or two of shift makes a shape's outline quicker to learn than with strided
        # convolutions (tried here: fewer shapes right after the same steps).
        layers: list[nn.Module] = []
        c_in = 3
        for c in cfg.channels:  # each halves the side: 32 -> 16 -> 8 -> 4
            layers += [nn.Conv2d(c_in, c, kernel_size=3, padding=1), nn.GELU(), nn.MaxPool2d(2)]
            c_in = c
        self.convs = nn.Sequential(*layers)
        side = cfg.image_size // 2 ** len(cfg.channels)
        self.pos = nn.Parameter(torch.zeros(side * side, c_in))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        # Pixels arrive as bytes and become the weights' dtype here (bf16 on GPUs), so the data
        # path never depends on the precision the model trains in.
        x = images.permute(0, 3, 1, 2).to(self.pos.dtype) / 127.5 - 1.0
        x = self.convs(x)
        return x.flatten(2).transpose(1, 2) + self.pos


class Projector(nn.Module):
    """Each image token through a two-layer MLP, and one more token made from the whole grid
    (a linear map of every patch's features), which lets the LM read the picture as a whole
    from one place."""

    def __init__(self, cfg: VLMConfig) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(cfg.channels[-1], cfg.n_embd), nn.GELU(),
                                 nn.Linear(cfg.n_embd, cfg.n_embd))
        side = cfg.image_size // 2 ** len(cfg.channels)
        self.summary = nn.Linear(side * side * cfg.channels[-1], cfg.n_embd)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.cat((self.net(features), self.summary(features.flatten(1))[:, None]), 1)


class Block(nn.Module):
    def __init__(self, cfg: VLMConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class CaptionLM(nn.Module):
    def __init__(self, cfg: VLMConfig) -> None:
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd={cfg.n_embd} must be a multiple of n_head={cfg.n_head}")
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.max_len, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying

    def forward(self, tokens: torch.Tensor, prefix: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Logits at each of ``tokens``' positions (B, T, vocab). ``prefix`` (B, P, n_embd)
        goes in front, its own positions' outputs dropped; its last token, the picture's
        summary, is also added to every word's embedding."""
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        if prefix is not None:
            prefix = prefix.to(x.dtype)
            x = torch.cat((prefix, x + prefix[:, -1:]), dim=1)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x[:, -t:]))


class VLM(nn.Module):
    def __init__(self, cfg: VLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = ImageEncoder(cfg)
        self.projector = Projector(cfg)
        self.lm = CaptionLM(cfg)
        self.apply(_init)

    def logits(self, images: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
        prefix = None if images is None else self.projector(self.encoder(images))
        return self.lm(tokens, prefix)

    def forward(self, images: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
        """Mean next-word loss over the caption (padding left out); no images: the LM alone."""
        logits = self.logits(images, tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                               tokens[:, 1:].reshape(-1), ignore_index=0)  # 0: <pad>

    @torch.no_grad()
    def caption(self, images: torch.Tensor, bos: int = 1) -> torch.Tensor:
        """Greedy captions of ``images``: (B, max_len) token ids, <bos> first."""
        prefix = self.projector(self.encoder(images))
        out = torch.full((images.shape[0], 1), bos, dtype=torch.long, device=images.device)
        for _ in range(self.cfg.max_len - 1):
            nxt = self.lm(out, prefix)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat((out, nxt), dim=1)
        return out

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
