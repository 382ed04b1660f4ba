#!/usr/bin/env bash
# Run the pretraining example on ONE GPU node and report tokens/s and model FLOPs utilisation.
#
#   benchmarks/gpu.sh                 # every GPU of this machine (1-8), bf16, ~3 minutes
#   STEPS=100 BATCH=16 benchmarks/gpu.sh
#
# What it runs: `shoal run examples/pretrain/pipeline.py main` with PRETRAIN_GPU=1 (NCCL, bf16
# autocast, the ~85M-parameter "small" GPT with 1024-token context) on one node with one rank
# per GPU (PRETRAIN_NODES=1 PRETRAIN_GPUS_PER_NODE=N: the GPU request follows, so the local
# engine hands the ranks the real GPUs rather than emulating 8 on CPU). The data step runs first (cached after
# the first run); the figures are the pretrain step's steady-state tokens/s (the first logged
# interval, with start-up, left out) and MFU = tokens/s x model FLOPs per token / (GPUs x the
# GPU's dense bf16 peak). Results go to benchmarks/results/<date>-<gpu>x<N>-gpu.md.
#
# Needs: an NVIDIA GPU, and a Python ($PYTHON, default python3) that has torch with CUDA,
# numpy, tokenizers and psutil; Shoal itself is taken from this checkout (src/ on PYTHONPATH),
# so nothing is downloaded. CI never runs this, and nothing else depends on a GPU.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-200}
BATCH=${BATCH:-16}          # sequences of 1024 tokens per GPU per step
MODEL=${MODEL:-small}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu.sh: no NVIDIA GPU here (nvidia-smi -L failed); this benchmark needs one" >&2
  exit 2
fi
GPUS=$(nvidia-smi -L | wc -l)
GPUS=$(( GPUS > 8 ? 8 : GPUS ))
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

missing=$("$PYTHON" - <<'EOF'
import importlib.util
need = ["torch", "numpy", "tokenizers", "psutil"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
EOF
)
if [[ -n "$missing" ]]; then
  echo "gpu.sh: $PYTHON lacks: $missing (pip install $missing; torch must be a CUDA build)" >&2
  exit 2
fi
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else
  "gpu.sh: this torch (" + torch.__version__ + ") cannot see a GPU: install a CUDA build")'

export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export SHOAL_HOME=${SHOAL_HOME:-$PWD/.shoal-gpu}   # kept: a second run reuses the data step
export PRETRAIN_GPU=1 PRETRAIN_NODES=1 PRETRAIN_GPUS_PER_NODE=$GPUS  # resources follow
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "gpu.sh: $GPUS x $GPU_NAME, model $MODEL, $STEPS steps, batch $BATCH x 1024 per GPU"
START=$(date +%s)
"$PYTHON" -m shoal.cli.main run examples/pretrain/pipeline.py main \
  --model "$MODEL" --steps "$STEPS" --batch-size "$BATCH" --checkpoint-every 100 \
  > "$OUT/summary.json" 2> >(tee "$OUT/run.log" >&2)
WALL=$(( $(date +%s) - START ))

"$PYTHON" - "$OUT/summary.json" "$GPUS" "$GPU_NAME" "$STEPS" "$BATCH" "$MODEL" "$WALL" <<'EOF'
import datetime, json, re, subprocess, sys
from pathlib import Path

summary_path, gpus, name, steps, batch, model, wall = sys.argv[1:]
gpus, wall = int(gpus), int(wall)
s = json.loads(Path(summary_path).read_text())
# Dense bf16 peak per GPU, in FLOP/s (vendor datasheets, without sparsity).
PEAKS = {"H200": 989e12, "H100": 989e12, "H800": 989e12, "GH200": 989e12, "B200": 2250e12,
         "A100": 312e12, "A800": 312e12, "L40S": 362e12, "L4": 121e12, "A10G": 70e12,
         "A10": 125e12, "RTX 4090": 165e12}
peak = next((v for k, v in PEAKS.items() if k.lower() in name.lower()), None)
tps = s["tokens_per_s"]
mfu = tps * s["flops_per_token"] / (gpus * peak) if peak else None
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
rows = [
    ("GPUs", f"{gpus} x {name}"),
    ("model", f"{model} ({s['flops_per_token']:.3g} training FLOPs per token), "
              f"bf16 autocast, {s['parallel']}"),
    ("steps x batch", f"{s['steps']} x {batch} x 1024 tokens per GPU"),
    ("tokens/s (steady state, all GPUs)", f"{tps:,.0f}"),
    ("tokens/s per GPU", f"{tps / gpus:,.0f}"),
    ("model FLOPs utilisation", f"{mfu:.1%}" if mfu is not None else
     f"unknown peak for {name!r}: add it to PEAKS in benchmarks/gpu.sh"),
    ("training loss first -> last", f"{s['first_loss']:.3f} -> {s['final_loss']:.3f}"),
    ("validation loss (untrained)", f"{s['val_loss']:.3f} ({s['untrained_val_loss']:.3f})"),
    ("whole pipeline wall time", f"{wall} s"),
]
table = "| figure | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
print("\n" + table)
day = datetime.date.today().isoformat()
tag = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
out = Path("benchmarks/results") / f"{day}-{tag}x{gpus}-gpu.md"
out.write_text(f"# Pretraining example on one GPU node, {day}\n\n"
               f"Command: `benchmarks/gpu.sh` (STEPS={steps} BATCH={batch} MODEL={model}); "
               f"Shoal commit {commit}.\n\n{table}\n")
print(f"\nwritten to {out}")
EOF
