"""Split a pretraining job by hardware: the seed document's three environments on Shoal.

    shoal run examples/seed/split.py pretrain                 # tokenizes, then trains 2 x 2
    shoal run examples/seed/split.py pretrain                 # again: tokenizing is a cache hit
    shoal run examples/seed/split.py pretrain --override pretrain.replicas=4 \\
        --override pretrain.nproc_per_node=1                  # another topology, same shards

- ``data`` gets CPUs, memory and disk, no GPU. It tokenizes a real corpus (the Python standard
  library's own source, present on every machine) into byte-level shards and returns them as a
  `flyte.Dir`. ``cache="auto"``: a second run on the same corpus reuses the shards.
- ``pretrain`` gets the accelerators: a gang of nodes running one torch.distributed loop, here
  a byte-bigram language model trained with DDP. Each rank downloads only its own shard.
- ``driver`` calls both; ``depends_on`` names the environments it calls, so a single
  ``shoal run`` (or ``shoal deploy``) brings all three.

The sizes below fit a two-core laptop. The seed document's full-size values are in the
comments; ``--override`` changes a clustered topology without editing the file.
"""

from __future__ import annotations

import sysconfig
import tempfile
from pathlib import Path

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, TorchRun

image = flyte.Image.from_debian_base().with_pip_packages("torch")

data_env = flyte.TaskEnvironment(
    name="data",
    image=image,
    resources=flyte.Resources(cpu=1, memory="1Gi", disk="2Gi"),  # full size: 16, 64Gi, 200Gi
    cache="auto",  # same corpus and code: the shards of an earlier run are reused
)

train_env = ClusteredTaskEnvironment(
    name="pretrain",
    image=image,
    # Full size: Resources(cpu=64, memory="512Gi", gpu="H200:8", shm="16Gi"), replicas=4,
    # nproc_per_node=8 -- 32 GPUs. Set shm: NCCL and data loaders use /dev/shm, and a
    # container's default is small. Resources apply to each node.
    resources=flyte.Resources(cpu=1, memory="2Gi"),
    replicas=2,
    nproc_per_node=2,
    runtime=TorchRun(),
    env_vars={"OMP_NUM_THREADS": "1"},  # four ranks share two cores here
)

driver_env = flyte.TaskEnvironment(
    name="driver",
    image=image,
    resources=flyte.Resources(cpu=2, memory="4Gi"),
    depends_on=[data_env, train_env],
)


@data_env.task
async def tokenize(shards: int = 4, max_files: int = 200) -> flyte.Dir:
    """Byte-level tokenization: every byte of the corpus is one token (a vocabulary of 256)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))[:max_files]
    corpus = b"\n".join(f.read_bytes() for f in files)
    out = Path(tempfile.mkdtemp(prefix="tokens-"))
    size = len(corpus) // shards
    for i in range(shards):
        (out / f"shard-{i:03d}.bin").write_bytes(corpus[i * size:(i + 1) * size])
    print(f"tokenized {len(corpus):,} bytes of {len(files)} files from {stdlib} "
          f"into {shards} shards", flush=True)
    return await flyte.Dir.from_local(str(out))


@train_env.task
async def train(corpus: flyte.Dir, steps: int = 40, lr: float = 0.5) -> float:
    """Fit next-byte probabilities (a bigram model) with DDP; return rank 0's final loss."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    ctx = flyte.ctx()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    # Only this rank's shard is downloaded; with more ranks than shards, ranks share them.
    files = sorted(await corpus.listing(), key=lambda f: f.name)
    mine = files[rank % len(files)]
    tokens = torch.frombuffer(bytearray(Path(await mine.download()).read_bytes()),
                              dtype=torch.uint8).long()
    print(f"[rank {rank}/{world}] node {ctx.node_rank}/{ctx.nnodes}: {mine.name}, "
          f"{tokens.numel():,} tokens", flush=True)

    torch.manual_seed(0)  # the same initial weights on every rank
    model = DDP(nn.Embedding(256, 256))  # row b: the logits of the byte that follows b
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(rank)

    loss_value = 0.0
    for step in range(steps):
        at = torch.randint(0, tokens.numel() - 1, (512,), generator=g)
        loss = nn.functional.cross_entropy(model(tokens[at]), tokens[at + 1])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
        if rank == 0 and step % 10 == 0:
            print(f"[rank 0] step {step:3d} loss {loss_value:.3f}", flush=True)

    dist.destroy_process_group()
    return loss_value


@driver_env.task
async def pretrain(steps: int = 40, shards: int = 4) -> float:
    """Tokenize on the CPU environment (cached), then train on the gang."""
    corpus = await tokenize(shards=shards)
    loss = await train(corpus, steps=steps)
    print(f"final loss {loss:.3f} nats per byte (uniform would be 5.545)", flush=True)
    return loss
