"""All-reduce bandwidth of one node's ranks: the NCCL path of ``gpu.sh``, as nccl-tests'
``all_reduce_perf`` reports it.

    torchrun --standalone --nproc-per-node=8 benchmarks/programs_allreduce.py --sizes-mib 8,256

Every rank joins the process group the pretrain example would (NCCL on GPUs, gloo on CPU: the
example's ``training.setup_device``), then all-reduces a bf16 tensor of each size (sum), a few
times to warm up and then ``--iters`` times; the time of a size is the slowest rank's mean.
Rank 0 prints one ``ALLREDUCE-RESULT {json}`` line: the backend, the world size, NCCL's version
where torch has one, and for each size its mean milliseconds, its algorithm bandwidth (bytes /
time) and its bus bandwidth (algorithm bandwidth x 2(n-1)/n: what each link carries in a ring,
comparable across world sizes; 0 for one rank, whose all-reduce crosses no link).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# The example's modules, imported as its pipeline imports them (its folder on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "pretrain"))

MARK = "ALLREDUCE-RESULT "


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mib", default="8,64,256", help="tensor sizes, MiB, comma-separated")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import training

    device, backend = training.setup_device()
    dist.init_process_group(backend=backend)  # RANK, WORLD_SIZE, MASTER_* come from torchrun
    world = dist.get_world_size()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    sizes = []
    for mib in (float(m) for m in args.sizes_mib.split(",") if m.strip()):
        x = torch.ones(int(mib * 2**20) // 2, dtype=torch.bfloat16, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(x)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        sync()
        mean = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64,
                            device=device)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        seconds = float(mean.item())
        algbw = x.numel() * x.element_size() / seconds / 1e9
        sizes.append({"mib": mib, "ms": seconds * 1e3, "algbw_gbs": algbw,
                      "busbw_gbs": algbw * 2 * (world - 1) / world})
        del x
    nccl = None
    if device.type == "cuda" and backend == "nccl":
        v = torch.cuda.nccl.version()  # a tuple (2, 21, 5); an int in older torch
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    if dist.get_rank() == 0:
        print(MARK + json.dumps({"backend": str(dist.get_backend()), "world_size": world,
                                 "nccl_version": nccl, "sizes": sizes}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
