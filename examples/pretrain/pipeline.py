"""Pretrain a GPT across several nodes: data on CPUs, training as one gang, an evaluation, and a
driver that calls all three.

    shoal run examples/pretrain/pipeline.py main                    # 2 nodes x 2 ranks, CPU
    shoal run examples/pretrain/pipeline.py main                    # again: the data is cached
    shoal run examples/pretrain/pipeline.py main --fsdp true        # FSDP2 instead of DDP
    shoal run examples/pretrain/pipeline.py main --kill-rank-at-step 120   # lose a rank, resume
    shoal run examples/pretrain/pipeline.py main --override pretrain.replicas=4 \\
        --override pretrain.nproc_per_node=1                        # another topology
    PRETRAIN_GPU=1 shoal run examples/pretrain/pipeline.py main --model small   # H200 nodes

The pieces, top to bottom:

1. **data** (``cache="auto"``): trains a byte-level BPE tokenizer on the Python standard
   library's source (on every machine, no download), tokenizes it with a pool of processes into
   ``uint16`` shards with a held-out split, and returns the folder as a ``shoal.Dir``. A second
   run with the same inputs and code reuses it.
2. **pretrain** (a gang of ``replicas`` nodes x ``nproc_per_node`` ranks, torch.distributed):
   every rank trains the GPT of ``gpt.py`` with the loop of ``training.py`` (DDP, or FSDP2),
   saves sharded checkpoints asynchronously every ``checkpoint_every`` steps, and starts from
   the latest one after a restart of the group, a retry or a ``shoal run --resume``. Rank 0
   returns the loss curve and the full weights as a ``shoal.File``.
3. **eval**: validation loss and perplexity on the held-out files, the same for the untrained
   model, and a short sample of generated text.
4. **driver**: calls the three in order and prints a summary.

``PRETRAIN_GPU=1`` switches the environments to real GPU nodes: 4 nodes of 8 H200s (or
``PRETRAIN_NODES`` x ``PRETRAIN_GPUS_PER_NODE``; the resources follow, so a local run on a
smaller machine asks for the GPUs it has instead of being emulated on CPU), NCCL,
bf16 autocast, 16 GiB of shared memory (NCCL and data loaders need more than a container's
default). ``benchmarks/gpu.sh`` runs it on one GPU node.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import shoal
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun

GPU = os.environ.get("PRETRAIN_GPU") == "1"
NODES = int(os.environ.get("PRETRAIN_NODES", "4"))  # GPU configuration only
GPUS_PER_NODE = int(os.environ.get("PRETRAIN_GPUS_PER_NODE", "8"))

image = shoal.Image.from_debian_base().with_pip_packages("torch", "numpy", "tokenizers")

# --- environments: one per kind of hardware ----------------------------------------------------

data_env = shoal.TaskEnvironment(
    name="data",
    image=image,
    resources=shoal.Resources(cpu=16, memory="64Gi", disk="200Gi") if GPU
    else shoal.Resources(cpu=2, memory="2Gi", disk="1Gi"),
    env_vars={"TOKENIZERS_PARALLELISM": "false"},  # parallelism comes from our process pool
    cache="auto",  # a second run on the same corpus reuses the shards
)

pretrain_env = ClusteredTaskEnvironment(
    name="pretrain",
    image=image,
    resources=shoal.Resources(cpu=8 * GPUS_PER_NODE, memory=f"{64 * GPUS_PER_NODE}Gi",
                              gpu=f"H200:{GPUS_PER_NODE}", shm="16Gi") if GPU
    else shoal.Resources(cpu=1, memory="2Gi"),
    replicas=NODES if GPU else 2,  # nodes
    nproc_per_node=GPUS_PER_NODE if GPU else 2,  # ranks per node: one per GPU
    runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(max_restarts=2, resume_after_preemption=True),
    env_vars={"OMP_NUM_THREADS": "1"},  # 4 ranks share 2 cores on a laptop-sized machine
)

eval_env = shoal.TaskEnvironment(
    name="eval",
    image=image,
    resources=shoal.Resources(cpu=8, memory="32Gi", gpu="H200:1") if GPU
    else shoal.Resources(cpu=1, memory="1Gi"),
)

driver_env = shoal.TaskEnvironment(
    name="driver",
    image=image,
    resources=shoal.Resources(cpu=1, memory="512Mi"),
    depends_on=[data_env, pretrain_env, eval_env],  # one `shoal run` brings all of them up
)


# --- 1. data -----------------------------------------------------------------------------------

@data_env.task
def prepare_data(vocab_size: int = 4096, shard_tokens: int = 1_000_000, val_every: int = 20,
                 workers: int = 0, max_files: int = 0) -> shoal.Dir:
    """Tokenizer, training shards and held-out tokens of the standard library's source."""
    import corpus

    workers = workers or corpus.default_workers()
    out = Path(tempfile.mkdtemp(prefix="pretrain-data-"))
    t0 = time.perf_counter()
    meta = corpus.build(out, vocab_size=vocab_size, shard_tokens=shard_tokens,
                        val_every=val_every, workers=workers, max_files=max_files)
    print(f"{meta.files_train} training files -> {meta.train_tokens:,} tokens in "
          f"{meta.shards} shard(s); {meta.files_val} held-out files -> {meta.val_tokens:,} "
          f"tokens; tokenized by {workers} processes in {meta.tokenize_seconds:.1f} s "
          f"({time.perf_counter() - t0:.1f} s in all)")
    return shoal.Dir.from_local_sync(out)


# --- 2. pretrain -------------------------------------------------------------------------------

@dataclass
class TrainResult:
    model: str
    parallel: str  # "ddp" or "fsdp2"
    world_size: int
    steps: int
    resumed_from: int  # 0, or the checkpointed step the last start of the gang began at
    losses: list[list[float]]  # [step, mean training loss] every log interval
    tokens_per_s: float  # global, steady state
    flops_per_token: float  # training FLOPs per token of this model (for utilisation)
    seconds: float
    checkpoint: str  # where the sharded checkpoints are
    weights: shoal.File | None  # the full state dict (rank 0; None on the other ranks)


@pretrain_env.task
def pretrain(data: shoal.Dir, model: str = "tiny", steps: int = 300, batch_size: int = 8,
             lr: float = 3e-3, checkpoint_every: int = 50, log_every: int = 10,
             fsdp: bool = False, kill_rank_at_step: int = -1) -> TrainResult:
    """Every rank trains; rank 0 returns the loss curve and the full weights."""
    import dataclasses

    import corpus
    import torch
    import torch.distributed as dist
    import training
    from gpt import GPT

    ctx = shoal.ctx()
    if model not in training.MODELS:
        raise ValueError(f"model={model!r}: not one of {sorted(training.MODELS)}; pass "
                         "--model tiny (CPU) or --model small (GPU)")
    device, backend = training.setup_device()
    dist.init_process_group(backend=backend)  # RANK, WORLD_SIZE, MASTER_* are set by Shoal
    rank = dist.get_rank()

    def log(msg: str) -> None:
        if rank == 0 or msg.startswith("fault"):
            print(msg, flush=True)

    folder = Path(data.download_sync())
    tokens = corpus.load_tokens(folder, "train")
    vocab = json.loads((folder / "meta.json").read_text())["vocab_size"]
    cfg = training.TrainConfig(
        model=dataclasses.replace(training.MODELS[model], vocab_size=vocab),
        steps=steps, batch_size=batch_size, lr=lr, checkpoint_every=checkpoint_every,
        log_every=log_every, fsdp=fsdp, kill_rank_at_step=kill_rank_at_step)
    log(f"{dist.get_world_size()} ranks on {ctx.nnodes} nodes, {device.type}, "
        f"{'FSDP2' if fsdp else 'DDP'}, {len(tokens):,} training tokens")

    stats, wrapped = training.train(cfg, tokens, checkpoint=ctx.checkpoint,
                                    first_attempt=not ctx.restart_attempt, log=log,
                                    metrics=shoal.log_metrics)
    state = training.full_state_dict(wrapped)  # a collective: every rank takes part
    weights = None
    if rank == 0:
        buf = io.BytesIO()
        torch.save({"config": cfg.model.__dict__, "model": state}, buf)
        path = Path(ctx.checkpoint.path) / "weights.pt"
        path.write_bytes(buf.getvalue())
        weights = shoal.File.from_local_sync(path)
    with torch.device("meta"):  # the shape is all it takes: no memory, no initialisation
        flops_per_token = GPT(cfg.model).flops_per_token()
    dist.barrier()
    dist.destroy_process_group()
    return TrainResult(model=model, parallel="fsdp2" if fsdp else "ddp",
                       world_size=ctx.world_size or 1, steps=stats.steps,
                       resumed_from=stats.start_step,
                       losses=[[s, v] for s, v in stats.losses],
                       tokens_per_s=stats.tokens_per_s,
                       flops_per_token=flops_per_token, seconds=stats.seconds,
                       checkpoint=ctx.checkpoint.uri, weights=weights)


# --- 3. eval -----------------------------------------------------------------------------------

@dataclass
class EvalResult:
    val_loss: float
    val_perplexity: float
    untrained_loss: float
    untrained_perplexity: float
    val_tokens: int
    sample: str


@eval_env.task
def evaluate(data: shoal.Dir, weights: shoal.File, eval_tokens: int = 32_768,
             sample_tokens: int = 60, prompt: str = "def ") -> EvalResult:
    """Held-out loss of the trained and of the untrained model; a sample of generated text."""
    import math

    import corpus
    import torch
    import training
    from gpt import GPT, GPTConfig
    from tokenizers import Tokenizer

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    saved = torch.load(weights.download_sync(), map_location="cpu", weights_only=True)
    cfg = GPTConfig(**saved["config"])
    folder = Path(data.download_sync())
    val = corpus.load_tokens(folder, "val")

    torch.manual_seed(training.TrainConfig(model=cfg).seed)  # the weights training began with
    untrained = GPT(cfg).to(device).eval()
    trained = GPT(cfg).to(device).eval()
    trained.load_state_dict(saved["model"])
    loss_untrained, n = training.evaluate_loss(untrained, val, eval_tokens, device)
    loss, _ = training.evaluate_loss(trained, val, eval_tokens, device)

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    prompt_ids = torch.tensor([tok.encode(prompt).ids], device=device)
    out = trained.generate(prompt_ids, sample_tokens,
                           generator=torch.Generator(device).manual_seed(0))
    sample = tok.decode(out[0].tolist())
    print(f"validation loss {loss:.4f} (perplexity {math.exp(loss):.1f}) on {n:,} held-out "
          f"tokens; untrained {loss_untrained:.4f}")
    return EvalResult(val_loss=round(loss, 4), val_perplexity=round(math.exp(loss), 2),
                      untrained_loss=round(loss_untrained, 4),
                      untrained_perplexity=round(math.exp(loss_untrained), 2),
                      val_tokens=n, sample=sample)


# --- 4. driver ---------------------------------------------------------------------------------

@dataclass
class Summary:
    parallel: str
    world_size: int
    steps: int
    first_loss: float
    final_loss: float
    val_loss: float
    untrained_val_loss: float
    val_perplexity: float
    tokens_per_s: float
    flops_per_token: float
    resumed_from: int
    checkpoint: str
    weights: shoal.File | None
    sample: str


def chart(losses: list[list[float]], width: int = 48) -> str:
    """The loss curve as one line of block characters, highest loss the tallest."""
    values = [v for _, v in losses]
    if len(values) > width:
        values = [values[i * len(values) // width] for i in range(width)]
    lo, hi = min(values), max(values)
    bars = "▁▂▃▄▅▆▇█"
    return "".join(bars[int((v - lo) / (hi - lo or 1) * (len(bars) - 1))] for v in values)


@driver_env.task
async def main(model: str = "tiny", steps: int = 300, batch_size: int = 8,
               checkpoint_every: int = 50, fsdp: bool = False, kill_rank_at_step: int = -1,
               vocab_size: int = 4096) -> Summary:
    """data -> pretrain -> eval, then a summary."""
    data = await prepare_data.aio(vocab_size=vocab_size)
    trained = await pretrain.aio(data, model=model, steps=steps, batch_size=batch_size,
                                 checkpoint_every=checkpoint_every, fsdp=fsdp,
                                 kill_rank_at_step=kill_rank_at_step)
    assert trained.weights is not None, "rank 0 returns the weights"
    report = await evaluate.aio(data, trained.weights)

    losses = trained.losses
    print(f"\ntrained {trained.parallel.upper()} on {trained.world_size} ranks for "
          f"{trained.steps} steps ({trained.tokens_per_s:,.0f} tokens/s)"
          + (f", resumed from step {trained.resumed_from}" if trained.resumed_from else ""))
    print(f"training loss  {losses[0][1]:.3f} (step {losses[0][0]:.0f}) "
          f"{chart(losses)} {losses[-1][1]:.3f} (step {losses[-1][0]:.0f})")
    print(f"validation     {report.val_loss:.3f} (perplexity {report.val_perplexity:,.1f}); "
          f"untrained model {report.untrained_loss:.3f} (perplexity "
          f"{report.untrained_perplexity:,.0f})")
    print(f"checkpoints    {trained.checkpoint}")
    print(f"sample         {report.sample!r}")
    return Summary(parallel=trained.parallel, world_size=trained.world_size,
                   steps=trained.steps, first_loss=losses[0][1], final_loss=losses[-1][1],
                   val_loss=report.val_loss, untrained_val_loss=report.untrained_loss,
                   val_perplexity=report.val_perplexity, tokens_per_s=trained.tokens_per_s,
                   flops_per_token=trained.flops_per_token,
                   resumed_from=trained.resumed_from, checkpoint=trained.checkpoint,
                   weights=trained.weights, sample=report.sample)
