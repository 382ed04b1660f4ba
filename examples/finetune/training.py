"""The training: the language model's pretraining, the VLM's fine-tuning under DeepSpeed, and
the evaluation. Plain PyTorch and DeepSpeed: nothing here knows about Shoal.

The pipeline's tasks call these functions; ``benchmarks/programs_finetune_bare.py`` calls
``finetune`` under bare ``torchrun`` with the same arguments, which is what makes the two
comparable. Fine-tuning's durable checkpoints come in as ``durable``: a function that makes
one for the engine (the pipeline passes ``shoal.clustered.DeepSpeedCheckpoint``).

- ``pretrain_lm``: the caption LM alone, on captions without pictures, in one process.
- ``finetune``: every rank builds the VLM with the pretrained LM's weights (the image encoder
  and projector start fresh, from a fixed seed), hands it to ``deepspeed.initialize`` with a
  ZeRO stage-2 config (optimizer states and gradients partitioned across the ranks; bf16 on
  GPUs) and trains all of it. Each rank draws its own pictures from a generator seeded by
  (seed, step, rank), so a resumed run sees the batches it would have seen. Every
  ``checkpoint_every`` steps DeepSpeed writes its checkpoint and ``durable`` makes it survive
  the rank's machine; at start-up the latest one is loaded, so a restarted gang loses at most
  one interval.
- ``evaluate``: on held-out pictures, the caption loss and greedy captions scored attribute
  by attribute (size, colour, shape, place).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import shapes
import torch
from vlm import VLM, VLMConfig

MODELS = {
    # About 0.2M parameters: 300 steps on 2 CPU cores in under a minute.
    "tiny": VLMConfig(channels=(32, 32, 64), n_layer=2, n_head=4, n_embd=64),
    # About 16M parameters, for GPUs.
    "small": VLMConfig(channels=(64, 128, 256), n_layer=8, n_head=8, n_embd=384),
}


def model_config(name: str) -> VLMConfig:
    if name not in MODELS:
        raise ValueError(f"model={name!r}: not one of {sorted(MODELS)}; pass --model tiny "
                         "(CPU) or --model small (GPU)")
    return VLMConfig(**{**MODELS[name].__dict__, "vocab_size": len(shapes.WORDS),
                        "max_len": shapes.MAX_LEN, "image_size": shapes.SIZE})


def setup_device() -> tuple[torch.device, str]:
    """This rank's device and the process-group backend: NCCL on GPUs, gloo on CPUs."""
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)  # before the process group, so NCCL binds it
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


# --- 1. the language model alone ------------------------------------------------------------

def pretrain_lm(cfg: VLMConfig, text: np.ndarray, *, steps: int, batch_size: int = 64,
                lr: float = 3e-3, seed: int = 0, log_every: int = 10,
                log: Callable[[str], None] = print
                ) -> tuple[dict[str, torch.Tensor], list[list[float]]]:
    """Train the caption LM on ``text`` (caption tokens); its weights and [step, mean loss]
    every ``log_every`` steps."""
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(seed)
    model = VLM(cfg).to(device)
    opt = torch.optim.AdamW(model.lm.parameters(), lr=lr, weight_decay=0.0)
    g = np.random.default_rng(seed)
    losses, total = [], 0.0
    for step in range(steps):
        for group in opt.param_groups:  # linear decay to a tenth
            group["lr"] = lr * (1 - 0.9 * step / steps)
        tokens = torch.from_numpy(text[g.integers(0, len(text), batch_size)]).to(device)
        loss = model(None, tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.item()
        if (step + 1) % log_every == 0 or step + 1 == steps:
            interval = (step + 1) % log_every or log_every
            losses.append([step + 1, round(total / interval, 4)])
            log(f"LM step {step + 1:4d}/{steps}  loss {losses[-1][1]:.4f}")
            total = 0.0
    return {k: v.detach().cpu() for k, v in model.lm.state_dict().items()}, losses


# --- 2. the VLM, fine-tuned with DeepSpeed --------------------------------------------------

@dataclass(frozen=True)
class FinetuneConfig:
    model: VLMConfig
    steps: int = 300
    batch_size: int = 16  # pictures per rank per step
    lr: float = 5e-3
    warmup: int = 20
    zero_stage: int = 2
    bf16: bool = False  # bf16 weights and activations, fp32 master weights (GPUs)
    checkpoint_every: int = 50  # 0: never
    log_every: int = 10
    seed: int = 1234
    kill_rank_at_step: int = -1  # fault injection: the last rank SIGKILLs itself there, once


@dataclass
class FinetuneStats:
    start_step: int  # 0, or the step a restart resumed from
    steps: int
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, mean loss)
    samples_per_s: float = 0.0  # global, steady state (the first logged interval left out)
    seconds: float = 0.0
    resumed_tag: str = ""  # the DeepSpeed tag loaded at start-up, if any


def deepspeed_config(cfg: FinetuneConfig) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": cfg.batch_size,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        # torch's AdamW: DeepSpeed's fused and CPU Adams are C++ ops it would compile first.
        "optimizer": {"type": "AdamW", "params": {"lr": cfg.lr, "betas": [0.9, 0.95],
                                                  "weight_decay": 0.01, "torch_adam": True}},
        "scheduler": {"type": "WarmupCosineLR", "params": {
            "total_num_steps": cfg.steps, "warmup_num_steps": cfg.warmup,
            "warmup_type": "linear", "cos_min_ratio": 0.1}},
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.bf16},
        "steps_per_print": 1_000_000,  # the loop logs for itself
        "wall_clock_breakdown": False,
    }


def build_vlm(cfg: VLMConfig, lm_state: dict[str, torch.Tensor] | None, seed: int) -> VLM:
    """The model fine-tuning starts from: fresh encoder and projector (the same on every rank
    and in the evaluation's "before"), the pretrained LM's weights if given."""
    torch.manual_seed(seed)
    model = VLM(cfg)
    if lm_state is not None:
        model.lm.load_state_dict(lm_state)
    return model


def batch(data: dict[str, np.ndarray], cfg: FinetuneConfig, step: int, rank: int,
          device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's pictures and captions for ``step``: the same on every run of the step."""
    idx = np.random.default_rng([cfg.seed, step, rank]).integers(0, len(data["images"]),
                                                                 cfg.batch_size)
    return (torch.from_numpy(data["images"][idx]).to(device),
            torch.from_numpy(data["tokens"][idx]).to(device))


def finetune(cfg: FinetuneConfig, data: dict[str, np.ndarray],
             lm_state: dict[str, torch.Tensor] | None, *,
             durable: Callable[[Any], Any] | None = None, first_attempt: bool = True,
             log: Callable[[str], None] = print,
             metrics: Callable[[dict[str, float], int], None] | None = None,
             ) -> tuple[FinetuneStats, Any]:
    """Fine-tune on this rank (the process group must exist); rank 0's stats are global.
    Returns the stats and the DeepSpeed engine (``engine.module`` is the VLM)."""
    import deepspeed
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) \
        if torch.cuda.is_available() else torch.device("cpu")
    model = build_vlm(cfg.model, lm_state, cfg.seed).to(device)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=deepspeed_config(cfg))

    stats = FinetuneStats(start_step=0, steps=0)
    ds_ckpt = durable(engine) if durable is not None and cfg.checkpoint_every else None
    if ds_ckpt is not None and (tag := ds_ckpt.restore_sync()) is not None:
        _, client = engine.load_checkpoint(ds_ckpt.dir)  # model, ZeRO partitions, scheduler
        stats.start_step, stats.resumed_tag = int(client["step"]), tag
        log(f"resumed from DeepSpeed checkpoint {tag} (step {stats.start_step})")

    interval_loss = torch.zeros((), device=device)
    interval_steps, rates = 0, []
    t_start = t_log = time.perf_counter()
    for step in range(stats.start_step, cfg.steps):
        if step == cfg.kill_rank_at_step and first_attempt and rank == world - 1:
            log(f"fault injection: rank {rank} kills itself (SIGKILL) before step {step}")
            os.kill(os.getpid(), signal.SIGKILL)
        images, tokens = batch(data, cfg, step, rank, device)
        loss = engine(images, tokens)
        engine.backward(loss)
        engine.step()  # optimizer and LR scheduler
        interval_loss += loss.detach().float()
        interval_steps += 1
        done = step + 1

        if done % cfg.log_every == 0 or done == cfg.steps:
            dist.all_reduce(interval_loss)  # the mean over ranks and steps since the last log
            mean = interval_loss.item() / (interval_steps * world)
            now = time.perf_counter()
            rate = interval_steps * cfg.batch_size * world / (now - t_log)
            if stats.losses:  # the first interval carries the start-up
                rates.append(rate)
            stats.losses.append((done, round(mean, 4)))
            lr = engine.get_lr()[0]
            if metrics is not None:
                metrics({"loss": mean, "lr": lr, "samples_per_s": rate / world}, done)
            log(f"step {done:5d}/{cfg.steps}  loss {mean:.4f}  lr {lr:.2e}  "
                f"{rate:,.0f} samples/s")
            interval_loss.zero_()
            interval_steps, t_log = 0, now

        if ds_ckpt is not None and (done % cfg.checkpoint_every == 0 or done == cfg.steps):
            # Each rank writes its ZeRO partition (rank 0 the model too) under its own folder,
            # then hands the files to `durable`: committed once every rank's have landed.
            tag = f"global_step{engine.global_steps}"  # DeepSpeed's own name, on every rank
            engine.save_checkpoint(ds_ckpt.dir, tag=tag, client_state={"step": done})
            if done == cfg.steps:
                ds_ckpt.save_sync(tag)
            else:  # training goes on while the files are uploaded
                ds_ckpt.save_async(tag)
            for old in ds_ckpt.dir.glob("global_step*"):  # the store keeps the older ones
                if old.name != tag:
                    shutil.rmtree(old)
            log(f"checkpoint of step {done}" + ("" if done == cfg.steps
                                                else ": uploading in the background"))
    if ds_ckpt is not None:
        ds_ckpt.wait()
    stats.steps = cfg.steps
    stats.seconds = round(time.perf_counter() - t_start, 3)
    stats.samples_per_s = round(float(np.median(rates)) if rates else 0.0, 1)
    return stats, engine


def full_weights(engine: Any) -> dict[str, torch.Tensor]:
    """The VLM's weights, fp32 on CPU. ZeRO-2 partitions optimizer states and gradients, not
    the parameters: every rank holds them all."""
    return {k: v.detach().float().cpu() for k, v in engine.module.state_dict().items()}


# --- 3. evaluation ---------------------------------------------------------------------------

@torch.no_grad()
def evaluate(model: VLM, data: dict[str, np.ndarray], batch_size: int = 128
             ) -> dict[str, Any]:
    """On held-out pictures: the caption loss, and greedy captions scored against the truth
    (each attribute, and all four at once); three examples."""
    model.eval()
    device = next(model.parameters()).device
    n = len(data["images"])
    loss_sum, right = 0.0, {a: 0 for a in (*shapes.ATTRIBUTES, "all")}
    examples: list[list[str]] = []
    for first in range(0, n, batch_size):
        images = torch.from_numpy(data["images"][first:first + batch_size]).to(device)
        tokens = torch.from_numpy(data["tokens"][first:first + batch_size]).to(device)
        loss_sum += model(images, tokens).item() * len(images)
        for said, truth in zip(model.caption(images).tolist(), tokens.tolist(), strict=True):
            said_text, true_text = shapes.decode(said), shapes.decode(truth)
            got, want = shapes.attributes(said_text), shapes.attributes(true_text)
            hits = [got[a] == want[a] for a in shapes.ATTRIBUTES]
            for a, hit in zip(shapes.ATTRIBUTES, hits, strict=True):
                right[a] += hit
            right["all"] += all(hits)
            if len(examples) < 3:
                examples.append([true_text, said_text])
    return {"loss": round(loss_sum / n, 4),
            "accuracy": {a: round(c / n, 4) for a, c in right.items()},
            "examples": examples, "pictures": n}
