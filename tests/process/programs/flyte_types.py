"""Flyte 2-style tasks for the real-process tests of types and GPU emulation: pydantic models,
str/int enums and data frames between tasks, a task without a return annotation, and a GPU
gang (gpu="A100 80G:1") that calls init_process_group("nccl") on a machine without GPUs."""

from __future__ import annotations

import enum
import os

import pandas as pd
from pydantic import BaseModel

import shoal as flyte
from shoal.clustered import ClusteredTaskEnvironment, ClusterFailurePolicy, TorchRun
from shoal.io import DataFrame


class Split(str, enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Column(BaseModel):
    name: str
    scale: float = 1.0


class Config(BaseModel):
    rows: int
    columns: list[Column]
    tags: dict[str, int] = {}
    split: Split = Split.TRAIN


class Summary(BaseModel):
    split: Split
    level: Level
    total: float
    columns: list[str]
    rows_from_reference: int


data = flyte.TaskEnvironment(name="typesdata")
driver = flyte.TaskEnvironment(name="typesdriver", depends_on=[data])


@data.task
def make_table(cfg: Config, level: Level) -> pd.DataFrame:
    return pd.DataFrame({c.name: [c.scale * i * int(level) for i in range(cfg.rows)]
                         for c in cfg.columns})


@data.task
def as_reference(df: pd.DataFrame) -> DataFrame:
    return DataFrame.from_df(df)


@data.task
async def summarize(df: pd.DataFrame, ref: DataFrame, cfg: Config, level: Level) -> Summary:
    again = await ref.open(pd.DataFrame).all()
    return Summary(split=cfg.split, level=level, total=float(df.to_numpy().sum()),
                   columns=list(df.columns), rows_from_reference=len(again))


@data.task
def log_only(message: str):  # type: ignore[no-untyped-def]
    print(message)


@data.task
def forgot_annotation(x: int):  # type: ignore[no-untyped-def]
    return x + 1


@driver.task
async def pipeline(cfg: Config, level: Level) -> Summary:
    df = await make_table.aio(cfg, level)
    ref = await as_reference.aio(df)
    assert await log_only.aio("no annotation, returns None") is None
    return await summarize.aio(df, ref, cfg, level)


@driver.task
def calls_forgot() -> int:
    return int(forgot_annotation(1) or 0)


gpu_gang = ClusteredTaskEnvironment(
    name="gpugang", resources=flyte.Resources(cpu=1, memory="1Gi", gpu="A100 80G:1"),
    replicas=2, nproc_per_node=1, runtime=TorchRun(),
    failure_policy=ClusterFailurePolicy(collective_timeout=30, grace_period=3),
)


@gpu_gang.task
def all_reduce_on_nccl() -> dict[str, str]:
    """Written for GPUs, as Flyte's DDP examples are: NCCL, devices guarded by cuda checks."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    model = torch.nn.Linear(2, 1).to(device)
    ddp = DDP(model, device_ids=[local_rank] if torch.cuda.is_available() else None)
    ddp(torch.ones(1, 2, device=device)).sum().backward()
    t = torch.tensor([float(dist.get_rank() + 1)], device=device)
    dist.all_reduce(t)
    out = {"backend": str(dist.get_backend()), "sum": str(t.item()),
           "cuda": str(torch.cuda.is_available())}
    dist.destroy_process_group()
    return out
