"""Fine-tune a tiny vision-language model with DeepSpeed ZeRO-2 across nodes: pictures and
captions made on CPUs, a language model pretrained on the captions alone, the VLM fine-tuned by
a gang of ranks with durable DeepSpeed checkpoints, an evaluation, and a driver.

    shoal run examples/finetune/pipeline.py main                    # 2 nodes x 2 ranks, CPU
    shoal run examples/finetune/pipeline.py main                    # again: data and LM cached
    shoal run examples/finetune/pipeline.py main --kill-rank-at-step 120   # lose a rank, resume
    shoal run examples/finetune/pipeline.py main --override finetune.replicas=4 \\
        --override finetune.nproc_per_node=1                        # another topology
    FINETUNE_GPU=1 shoal run examples/finetune/pipeline.py main --model small   # H200 nodes

The pieces, top to bottom:

1. **make_data** (``cache="auto"``): draws pictures of coloured shapes with numpy
   (``shapes.py``: nothing downloaded), their captions ("a small red circle at the top left"),
   held-out pictures, and captions alone for the language model; returns the folder as a
   ``shoal.Dir``. A second run with the same inputs and code reuses it.
2. **pretrain_lm** (``cache="auto"``, one device): the caption language model of ``vlm.py``
   learns the captions' language from text alone, so it knows *how* to describe a picture
   before it has seen one.
3. **finetune** (a gang of ``replicas`` nodes x ``nproc_per_node`` ranks): every rank builds
   the VLM (a fresh image encoder and projector in front of the pretrained LM) and trains all
   of it with DeepSpeed ZeRO stage 2 (``training.py``); DeepSpeed's own checkpoints are made
   durable every ``checkpoint_every`` steps by ``shoal.clustered.DeepSpeedCheckpoint``, and a
   restarted gang (a killed rank, a retry, a preemption, ``shoal run --resume``) loads the
   latest one. Rank 0 returns the loss curve and the weights as a ``shoal.File``.
4. **evaluate** (one device): on held-out pictures, the caption loss and greedy captions
   scored attribute by attribute, for the fine-tuned model and for the model fine-tuning
   started from (pretrained LM, untrained encoder and projector).
5. **main**: calls them in order and prints a summary.

``FINETUNE_GPU=1`` switches to GPU nodes: ``FINETUNE_NODES`` (2) x ``FINETUNE_GPUS_PER_NODE``
(8) H200s, NCCL, bf16 weights with fp32 master weights (DeepSpeed's ``bf16`` section), 16 GiB
of shared memory; the one-device tasks take one GPU each.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import shoal
from shoal.clustered import (
    ClusteredTaskEnvironment,
    ClusterFailurePolicy,
    DeepSpeedCheckpoint,
    TorchRun,
)

GPU = os.environ.get("FINETUNE_GPU") == "1"
NODES = int(os.environ.get("FINETUNE_NODES", "2"))  # GPU configuration only
GPUS_PER_NODE = int(os.environ.get("FINETUNE_GPUS_PER_NODE", "8"))

image = shoal.Image.from_debian_base().with_pip_packages("torch", "numpy", "deepspeed")

# --- environments: one per kind of hardware ----------------------------------------------------

data_env = shoal.TaskEnvironment(
    name="data",
    image=image,
    resources=shoal.Resources(cpu=8, memory="16Gi") if GPU
    else shoal.Resources(cpu=1, memory="1Gi"),
    cache="auto",  # a second run draws nothing
)

single_env = shoal.TaskEnvironment(  # the tasks that need one device: LM pretraining, eval
    name="single",
    image=image,
    resources=shoal.Resources(cpu=8, memory="32Gi", gpu="H200:1") if GPU
    else shoal.Resources(cpu=1, memory="2Gi"),
    env_vars={"OMP_NUM_THREADS": "1"},
)

finetune_env = ClusteredTaskEnvironment(
    name="finetune",
    image=image,
    resources=shoal.Resources(cpu=8 * GPUS_PER_NODE, memory=f"{64 * GPUS_PER_NODE}Gi",
                              gpu=f"H200:{GPUS_PER_NODE}", shm="16Gi") if GPU
    else shoal.Resources(cpu=1, memory="3Gi"),
    replicas=NODES if GPU else 2,  # nodes
    nproc_per_node=GPUS_PER_NODE if GPU else 2,  # ranks per node: one per GPU
    runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=2, resume_after_preemption=True),
    env_vars={"OMP_NUM_THREADS": "1"},  # 4 ranks share 2 cores on a laptop-sized machine
)

driver_env = shoal.TaskEnvironment(
    name="driver",
    image=image,
    resources=shoal.Resources(cpu=1, memory="512Mi"),
    depends_on=[data_env, single_env, finetune_env],  # one `shoal run` brings all of them up
)


# --- 1. data -----------------------------------------------------------------------------------

@data_env.task
def make_data(train: int = 4096, val: int = 512, text: int = 8192, seed: int = 0) -> shoal.Dir:
    """Pictures and captions for training and evaluation, and captions alone for the LM."""
    import shapes

    out = Path(tempfile.mkdtemp(prefix="finetune-data-"))
    t0 = time.perf_counter()
    meta = shapes.build(out, train=train, val=val, text=text, seed=seed)
    print(f"{meta.train:,} training and {meta.val:,} held-out pictures "
          f"({meta.image_size}x{meta.image_size}), {meta.text:,} captions for the LM, "
          f"{len(meta.vocab)} words; {time.perf_counter() - t0:.1f} s")
    return shoal.Dir.from_local_sync(out)


# --- 2. the language model alone ---------------------------------------------------------------

@dataclass
class LMResult:
    weights: shoal.File
    losses: list[list[float]]  # [step, mean loss] every 10 steps
    captions: int


@single_env.task(cache="auto")
def pretrain_lm(data: shoal.Dir, model: str = "tiny", steps: int = 100,
                batch_size: int = 32) -> LMResult:
    """The caption LM, trained on captions without pictures."""
    import shapes
    import torch
    import training

    cfg = training.model_config(model)
    text = shapes.load(Path(data.download_sync()), "text")["tokens"]
    state, losses = training.pretrain_lm(cfg, text, steps=steps, batch_size=batch_size)
    path = Path(tempfile.mkdtemp(prefix="finetune-lm-")) / "lm.pt"
    torch.save(state, path)
    return LMResult(weights=shoal.File.from_local_sync(path), losses=losses,
                    captions=len(text))


# --- 3. fine-tuning, DeepSpeed ZeRO-2 across the gang ------------------------------------------

@dataclass
class FinetuneResult:
    world_size: int
    nodes: int
    steps: int
    resumed_from: int  # 0, or the checkpointed step the last start of the gang began at
    losses: list[list[float]]  # [step, mean loss] every log interval
    samples_per_s: float  # global, steady state
    seconds: float
    params: int
    checkpoint: str  # where the DeepSpeed checkpoints are
    weights: shoal.File | None  # the fine-tuned VLM (rank 0; None on the other ranks)


@finetune_env.task
def finetune(data: shoal.Dir, lm: shoal.File, model: str = "tiny", steps: int = 300,
             batch_size: int = 16, lr: float = 5e-3, checkpoint_every: int = 50,
             log_every: int = 10, kill_rank_at_step: int = -1) -> FinetuneResult:
    """Every rank trains the VLM under DeepSpeed; rank 0 returns the curve and the weights."""
    import deepspeed
    import shapes
    import torch
    import torch.distributed as dist
    import training

    ctx = shoal.ctx()
    device, backend = training.setup_device()
    deepspeed.init_distributed(dist_backend=backend)  # RANK, WORLD_SIZE, MASTER_*: Shoal's
    rank = dist.get_rank()

    def log(msg: str) -> None:
        if rank == 0 or msg.startswith("fault"):
            print(msg, flush=True)

    cfg = training.FinetuneConfig(
        model=training.model_config(model), steps=steps, batch_size=batch_size, lr=lr,
        bf16=device.type == "cuda", checkpoint_every=checkpoint_every, log_every=log_every,
        kill_rank_at_step=kill_rank_at_step)
    train = shapes.load(Path(data.download_sync()), "train")
    lm_state = torch.load(lm.download_sync(), map_location="cpu", weights_only=True)
    log(f"{dist.get_world_size()} ranks on {ctx.nnodes} nodes, {device.type}, DeepSpeed "
        f"ZeRO-{cfg.zero_stage}{', bf16' if cfg.bf16 else ''}, {len(train['images']):,} "
        "training pictures")

    stats, engine = training.finetune(cfg, train, lm_state, durable=DeepSpeedCheckpoint,
                                      first_attempt=not ctx.restart_attempt, log=log,
                                      metrics=shoal.log_metrics)
    weights = None
    if rank == 0:
        buf = io.BytesIO()
        torch.save({"config": cfg.model.__dict__, "model": training.full_weights(engine)},
                   buf)
        path = Path(ctx.checkpoint.path) / "vlm.pt"
        path.write_bytes(buf.getvalue())
        weights = shoal.File.from_local_sync(path)
    dist.barrier()
    dist.destroy_process_group()
    return FinetuneResult(world_size=ctx.world_size or 1, nodes=ctx.nnodes or 1,
                          steps=stats.steps, resumed_from=stats.start_step,
                          losses=[[s, v] for s, v in stats.losses],
                          samples_per_s=stats.samples_per_s, seconds=stats.seconds,
                          params=engine.module.num_params(), checkpoint=ctx.checkpoint.uri,
                          weights=weights)


# --- 4. evaluation -----------------------------------------------------------------------------

@dataclass
class Scores:
    loss: float  # caption loss (nats per word) on the held-out pictures
    accuracy: dict[str, float]  # size, colour, shape, place, and "all" four right
    examples: list[list[str]]  # [true caption, the model's]


@dataclass
class EvalResult:
    before: Scores  # the model fine-tuning started from
    after: Scores
    pictures: int


@single_env.task
def evaluate(data: shoal.Dir, lm: shoal.File, weights: shoal.File) -> EvalResult:
    """Held-out scores of the fine-tuned VLM and of the one fine-tuning started from."""
    import shapes
    import torch
    import training
    from vlm import VLM, VLMConfig

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    saved = torch.load(weights.download_sync(), map_location="cpu", weights_only=True)
    cfg = VLMConfig(**{**saved["config"], "channels": tuple(saved["config"]["channels"])})
    val = shapes.load(Path(data.download_sync()), "val")
    lm_state = torch.load(lm.download_sync(), map_location="cpu", weights_only=True)
    before = training.build_vlm(cfg, lm_state, training.FinetuneConfig(model=cfg).seed)
    after = VLM(cfg)
    after.load_state_dict(saved["model"])
    scores = {}
    for name, model in (("before", before), ("after", after)):
        got = training.evaluate(model.to(device), val)
        scores[name] = Scores(loss=got["loss"], accuracy=got["accuracy"],
                              examples=got["examples"])
    print(f"held-out caption loss {scores['after'].loss:.4f} (before fine-tuning "
          f"{scores['before'].loss:.4f}); all four attributes right "
          f"{scores['after'].accuracy['all']:.1%} (before {scores['before'].accuracy['all']:.1%})")
    return EvalResult(before=scores["before"], after=scores["after"], pictures=len(val["images"]))


# --- 5. driver ---------------------------------------------------------------------------------

@dataclass
class Summary:
    world_size: int
    steps: int
    first_loss: float
    final_loss: float
    lm_first_loss: float
    lm_final_loss: float
    val_loss: float
    val_loss_before: float
    accuracy: dict[str, float]
    accuracy_before: dict[str, float]
    samples_per_s: float
    resumed_from: int
    checkpoint: str
    weights: shoal.File | None
    example: list[str]  # [true caption, the fine-tuned model's]


def chart(losses: list[list[float]], width: int = 48) -> str:
    """The loss curve as one line of block characters, highest loss the tallest."""
    values = [v for _, v in losses]
    if len(values) > width:
        values = [values[i * len(values) // width] for i in range(width)]
    lo, hi = min(values), max(values)
    bars = "▁▂▃▄▅▆▇█"
    return "".join(bars[int((v - lo) / (hi - lo or 1) * (len(bars) - 1))] for v in values)


def check_arguments(model: str, steps: int, checkpoint_every: int,
                    kill_rank_at_step: int) -> None:
    """Refuse arguments the run would trip over later, naming the fix."""
    import training

    training.model_config(model)
    if steps < 1:
        raise ValueError(f"steps={steps}: must be at least 1; e.g. --steps 300")
    if checkpoint_every < 0:
        raise ValueError(f"checkpoint_every={checkpoint_every}: must be >= 0 (0: no "
                         "checkpoints); e.g. --checkpoint-every 50")
    if kill_rank_at_step >= steps or kill_rank_at_step == 0 or kill_rank_at_step < -1:
        raise ValueError(f"kill_rank_at_step={kill_rank_at_step}: must be between 1 and "
                         f"steps - 1 ({steps - 1}), or -1 for no fault; e.g. "
                         f"--kill-rank-at-step {max(1, steps * 2 // 5)}")
    if kill_rank_at_step > 0 and not 0 < checkpoint_every < kill_rank_at_step:
        raise ValueError(f"kill_rank_at_step={kill_rank_at_step} with checkpoint_every="
                         f"{checkpoint_every}: a restart resumes from a checkpoint only if one "
                         f"was saved before the kill; pass --checkpoint-every below "
                         f"{kill_rank_at_step}")


@driver_env.task
async def main(model: str = "tiny", steps: int = 300, batch_size: int = 16,
               lm_steps: int = 100, checkpoint_every: int = 50,
               kill_rank_at_step: int = -1) -> Summary:
    """data -> LM pretraining -> DeepSpeed fine-tuning -> eval, then a summary."""
    check_arguments(model, steps, checkpoint_every, kill_rank_at_step)
    data = await make_data.aio()
    lm = await pretrain_lm.aio(data, model=model, steps=lm_steps)
    tuned = await finetune.aio(data, lm.weights, model=model, steps=steps,
                               batch_size=batch_size, checkpoint_every=checkpoint_every,
                               kill_rank_at_step=kill_rank_at_step)
    assert tuned.weights is not None, "rank 0 returns the weights"
    report = await evaluate.aio(data, lm.weights, tuned.weights)

    before, after = report.before, report.after
    pct = "  ".join(f"{a} {after.accuracy[a]:.0%} ({before.accuracy[a]:.0%})"
                    for a in ("size", "colour", "shape", "place"))
    print(f"\nfine-tuned {tuned.params:,} parameters with DeepSpeed ZeRO-2 on "
          f"{tuned.world_size} ranks ({tuned.nodes} nodes) for {tuned.steps} steps "
          f"({tuned.samples_per_s:,.0f} pictures/s)"
          + (f", resumed from step {tuned.resumed_from}" if tuned.resumed_from else ""))
    print(f"LM pretraining  {lm.losses[0][1]:.3f} (step {lm.losses[0][0]:.0f}) -> "
          f"{lm.losses[-1][1]:.3f} (step {lm.losses[-1][0]:.0f}) on {lm.captions:,} captions")
    print(f"fine-tuning     {tuned.losses[0][1]:.3f} (step {tuned.losses[0][0]:.0f}) "
          f"{chart(tuned.losses)} {tuned.losses[-1][1]:.3f} (step {tuned.losses[-1][0]:.0f})")
    print(f"held-out        {report.pictures} pictures: caption loss {after.loss:.3f} "
          f"(before fine-tuning {before.loss:.3f}); all four right {after.accuracy['all']:.1%} "
          f"(before {before.accuracy['all']:.1%}, chance 0.4%)")
    print(f"right, by word  {pct}")
    print(f"a picture of    {after.examples[0][0]!r}: the model says {after.examples[0][1]!r}")
    print(f"checkpoints     {tuned.checkpoint}")
    return Summary(world_size=tuned.world_size, steps=tuned.steps,
                   first_loss=tuned.losses[0][1], final_loss=tuned.losses[-1][1],
                   lm_first_loss=lm.losses[0][1], lm_final_loss=lm.losses[-1][1],
                   val_loss=after.loss, val_loss_before=before.loss,
                   accuracy=after.accuracy, accuracy_before=before.accuracy,
                   samples_per_s=tuned.samples_per_s, resumed_from=tuned.resumed_from,
                   checkpoint=tuned.checkpoint, weights=tuned.weights,
                   example=after.examples[0])
