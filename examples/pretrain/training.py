"""The training loop: plain PyTorch, run by every rank of the gang.

Nothing here knows about Shoal. The pipeline's ``pretrain`` task calls ``train`` with a Shoal
checkpoint; ``benchmarks/programs_pretrain_bare.py`` calls the same function under bare
``torchrun`` with none, which is what makes the two comparable.

- DDP, or FSDP2 (``fully_shard`` on every block and on the whole model) with ``fsdp=True``.
- Each rank draws its own random windows of the training tokens from a generator seeded by
  (seed, step, rank): a resumed run sees exactly the batches it would have seen.
- AdamW, linear warm-up then cosine decay, gradient clipping; bf16 autocast on GPUs.
- Every ``checkpoint_every`` steps the model and optimizer state are saved sharded and
  asynchronously (training goes on while the bytes are written); at start-up the latest saved
  step is loaded, so a restarted gang loses at most one checkpoint interval.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from gpt import GPT, GPTConfig

MODELS = {
    # About 1.3M parameters: a few hundred steps on 2 CPU cores, in a couple of minutes.
    "tiny": GPTConfig(vocab_size=4096, block_size=128, n_layer=4, n_head=4, n_embd=128),
    # About 85M parameters (GPT-2 small's shape with a 4096-token vocabulary), for GPUs.
    "small": GPTConfig(vocab_size=4096, block_size=1024, n_layer=12, n_head=12, n_embd=768),
}


@dataclass(frozen=True)
class TrainConfig:
    model: GPTConfig
    steps: int = 300
    batch_size: int = 8  # sequences per rank per step
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    checkpoint_every: int = 50  # 0: never
    log_every: int = 10
    fsdp: bool = False
    seed: int = 1337
    kill_rank_at_step: int = -1  # fault injection: the last rank SIGKILLs itself there, once


@dataclass
class TrainStats:
    start_step: int  # 0, or the step a restart resumed from
    steps: int
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, mean loss)
    tokens_per_s: float = 0.0  # global, steady state (the first logged interval left out)
    seconds: float = 0.0
    tokens: int = 0  # processed by this start of the loop, all ranks


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def batch(tokens: np.ndarray, cfg: TrainConfig, step: int, rank: int,
          device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch for ``step``: the same on every run of the same step."""
    block = cfg.model.block_size
    g = np.random.default_rng([cfg.seed, step, rank])
    starts = g.integers(0, len(tokens) - block - 1, size=cfg.batch_size)
    window = np.stack([tokens[s:s + block + 1] for s in starts]).astype(np.int64)
    xy = torch.from_numpy(window)
    if device.type == "cuda":
        xy = xy.pin_memory().to(device, non_blocking=True)
    return xy[:, :-1], xy[:, 1:]


def setup_device() -> tuple[torch.device, str]:
    """This rank's device and the process-group backend: NCCL on GPUs, gloo on CPUs."""
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)  # before the process group, so NCCL binds it
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def build_model(cfg: TrainConfig, device: torch.device) -> torch.nn.Module:
    """The GPT, wrapped for data parallelism (DDP) or sharded in place (FSDP2)."""
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    gpt = GPT(cfg.model).to(device)
    if cfg.fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in gpt.blocks:
            fully_shard(block)
        fully_shard(gpt)
        return gpt
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(gpt, device_ids=[device.index] if device.type == "cuda" else None)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.lr, betas=(0.9, 0.95))


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's parameters on CPU, on rank 0 (a collective: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))


def train(cfg: TrainConfig, tokens: np.ndarray, *, checkpoint: Any = None,
          first_attempt: bool = True, log: Callable[[str], None] = print,
          metrics: Callable[[dict[str, float], int], None] | None = None,
          ) -> tuple[TrainStats, torch.nn.Module]:
    """Run the loop on this rank (the process group must exist); rank 0's stats are global.

    ``metrics(values, step)`` (e.g. ``shoal.log_metrics``) gets this rank's loss, grad norm
    and lr for every step and its tokens/s for every interval. The per-step values are kept
    as tensors and read once per interval, so a GPU is not synchronised on every step.
    """
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) \
        if torch.cuda.is_available() else torch.device("cpu")
    model = build_model(cfg, device)
    optimizer = make_optimizer(model, cfg)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else None

    start = 0
    if checkpoint is not None:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        loaded = checkpoint.load_state_dict(state)
        if loaded is not None:
            set_state_dict(model, optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
            start = loaded
            log(f"resumed from the checkpoint of step {start}")

    stats = TrainStats(start_step=start, steps=start)
    tokens_per_step = cfg.batch_size * cfg.model.block_size * world
    pending = None  # the last asynchronous save, still being written
    interval_loss = torch.zeros((), device=device)
    interval_steps, rates = 0, []
    recent: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (step, loss, grad norm)
    t_start = t_log = time.perf_counter()
    for step in range(start, cfg.steps):
        if step == cfg.kill_rank_at_step and first_attempt and rank == world - 1:
            log(f"fault injection: rank {rank} kills itself (SIGKILL) before step {step}")
            os.kill(os.getpid(), signal.SIGKILL)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        x, y = batch(tokens, cfg, step, rank, device)
        if amp is not None:
            with amp:
                _, loss = model(x, y)
        else:
            _, loss = model(x, y)
        assert loss is not None
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        interval_loss += loss.detach()
        interval_steps += 1
        done = step + 1
        if metrics is not None:
            if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor; every rank takes part
                grad_norm = grad_norm.full_tensor()
            recent.append((done, loss.detach(), grad_norm.detach()))
            metrics({}, done)  # marks the step (a profiler's window, hang diagnosis' progress)

        if done % cfg.log_every == 0 or done == cfg.steps:
            dist.all_reduce(interval_loss)  # the mean over ranks and steps since the last log
            mean = interval_loss.item() / (interval_steps * world)
            now = time.perf_counter()
            rate = interval_steps * tokens_per_step / (now - t_log)
            if stats.losses:  # the first interval carries the start-up
                rates.append(rate)
            stats.losses.append((done, round(mean, 4)))
            if metrics is not None:
                _report(metrics, recent, cfg, rate / world)
                recent.clear()
            log(f"step {done:5d}/{cfg.steps}  loss {mean:.4f}  lr {lr_at(step, cfg):.2e}  "
                f"{rate:,.0f} tok/s")
            interval_loss.zero_()
            interval_steps, t_log = 0, now

        if checkpoint is not None and cfg.checkpoint_every and (
                done % cfg.checkpoint_every == 0 or done == cfg.steps):
            model_sd, optim_sd = get_state_dict(model, optimizer)
            last = done == cfg.steps  # the last save is waited for anyway
            pending = checkpoint.save_state_dict({"model": model_sd, "optim": optim_sd},
                                                 step=done, async_save=not last)
            log(f"checkpoint of step {done}" + ("" if last else ": saving in the background"))
    if pending is not None:
        pending.result()  # the last save has landed
    stats.steps = cfg.steps
    stats.seconds = round(time.perf_counter() - t_start, 3)
    stats.tokens = (cfg.steps - start) * tokens_per_step
    stats.tokens_per_s = round(float(np.median(rates)) if rates else 0.0, 1)
    return stats, model


@torch.no_grad()
def _report(metrics: Callable[[dict[str, float], int], None],
            recent: list[tuple[int, torch.Tensor, torch.Tensor]], cfg: TrainConfig,
            rank_tokens_per_s: float) -> None:
    if not recent:
        return
    values = torch.stack([torch.stack((loss.float(), norm.float())) for _, loss, norm in recent])
    for (done, _, _), (loss, norm) in zip(recent, values.tolist(), strict=True):
        metrics({"loss": loss, "grad_norm": norm, "lr": lr_at(done - 1, cfg)}, done)
    metrics({"tokens_per_s": rank_tokens_per_s}, recent[-1][0])


def evaluate_loss(model: GPT, tokens: np.ndarray, max_tokens: int, device: torch.device,
                  batch_size: int = 16) -> tuple[float, int]:
    """Mean next-token loss over consecutive, non-overlapping windows of ``tokens``; and how
    many tokens were predicted."""
    block = model.cfg.block_size
    windows = min((len(tokens) - 1) // block, max(1, max_tokens // block))
    total, count = 0.0, 0
    for first in range(0, windows, batch_size):
        rows = range(first, min(windows, first + batch_size))
        xy = torch.from_numpy(np.stack([tokens[r * block:r * block + block + 1]
                                        for r in rows]).astype(np.int64)).to(device)
        _, loss = model(xy[:, :-1], xy[:, 1:])
        assert loss is not None
        total += loss.item() * len(rows) * block
        count += len(rows) * block
    return total / count, count
