#!/usr/bin/env bash
# The pretrain example on ONE GPU node, under Shoal and under bare torchrun, in at most 10 min.
#
#   benchmarks/gpu.sh                    # every GPU of this machine (1-8), ~6 minutes
#   STEPS=200 ROUNDS=2 GPUS=1 benchmarks/gpu.sh
#   benchmarks/gpu.sh --dry-run          # every phase on CPU: everything but the GPU itself
#
# Rows, rounds interleaved: the example's training loop (model MODEL, DDP, NCCL, bf16
# autocast, one rank per GPU) under `torchrun --standalone --nproc-per-node=GPUS
# benchmarks/programs_pretrain_bare.py` and under `shoal run benchmarks/programs_pretrain_shoal.py
# train` (the same body, the example's gang at one node). Reported: steady-state tokens/s of
# each, shoal / bare torchrun (goal >= 0.97x), model FLOPs utilisation against the GPU's dense
# bf16 peak, the runs' process-group backend (NCCL), an all_reduce bandwidth table, and rank 0
# of one more shoal run under Nsight Systems when `nsys` is on PATH. Phases and their limits:
# benchmarks/_gpu_bench.py; the report: benchmarks/gpu_report.py.
#
# Settings (environment), each checked before anything runs:
#   STEPS=300       training steps per run, 30-3000 (dry run: 30)
#   BATCH=16        sequences per GPU per step, 1-64 (dry run: 4)
#   MODEL=small     tiny or small (examples/pretrain/training.py's MODELS; dry run: tiny)
#   ROUNDS=3        runs of each row, 1-5 (dry run: 1)
#   GPUS=all        ranks, one per GPU, 1-8 (default: every GPU, at most 8; dry run: 2 CPU ranks)
#   TIME_LIMIT=600  seconds for everything, 120-600
#   PYTHON=python3  a Python with torch (a CUDA build), numpy, tokenizers, and Shoal's
#                   dependencies (psutil, packaging, pyyaml, crc32c)
#   OUT=benchmarks/results   where the results go (dry run: a new temp folder)
# Shoal is taken from this checkout (src/ on PYTHONPATH); nothing is downloaded.
set -euo pipefail

cd "$(dirname "$0")/.."
DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu.sh: unknown argument '$arg'; the only ones are --dry-run and --help" >&2
       exit 2 ;;
  esac
done

# Every problem is said before anything runs, all of them at once: on a lent GPU machine each
# round trip costs minutes.
problems=()
problem() { problems+=("$*"); }

# check NAME VALUE MIN MAX WHAT DEFAULT: a whole number in [MIN, MAX], or a clear refusal.
check() {
  local name=$1 value=$2 min=$3 max=$4 what=$5 default=$6
  if ! [[ "$value" =~ ^[0-9]+$ ]] || (( 10#$value < min || 10#$value > max )); then
    problem "$name=$value: must be a whole number from $min to $max ($what); fix: $name=$default, or unset $name for the default"
    return 1
  fi
}

if (( DRY_RUN )); then
  STEPS=${STEPS:-30} BATCH=${BATCH:-4} MODEL=${MODEL:-tiny} ROUNDS=${ROUNDS:-1} GPUS=${GPUS:-2}
else
  STEPS=${STEPS:-300} BATCH=${BATCH:-16} MODEL=${MODEL:-small} ROUNDS=${ROUNDS:-3}
fi
TIME_LIMIT=${TIME_LIMIT:-600}
PYTHON=${PYTHON:-python3}
check STEPS "$STEPS" 30 3000 "training steps per run: the steady-state window runs from step 10 to the last" 300 || true
check BATCH "$BATCH" 1 64 "sequences per GPU per step" 16 || true
case "$MODEL" in
  tiny|small) ;;
  *) problem "MODEL=$MODEL: must be one of tiny, small (examples/pretrain/training.py's MODELS); fix: MODEL=small on GPUs, MODEL=tiny on CPU" ;;
esac
check ROUNDS "$ROUNDS" 1 5 "runs of each row; the median is kept" 3 || true
check TIME_LIMIT "$TIME_LIMIT" 120 600 "seconds for the whole benchmark, every phase included" 600 || true
gpus_ok=1
if [[ -n "${GPUS:-}" ]]; then
  check GPUS "$GPUS" 1 8 "ranks on this node, one per GPU" 1 || gpus_ok=0
fi

# The Python and its packages; torch's build read from its version.py (no import: seconds).
PROBE='
import importlib.util, os, runpy
# module: its pip name; the example needs the first three, Shoal the rest (pyproject.toml)
need = {"torch": "torch", "numpy": "numpy", "tokenizers": "tokenizers", "psutil": "psutil",
        "packaging": "packaging", "yaml": "pyyaml", "crc32c": "crc32c"}
missing = ",".join(p for m, p in need.items() if importlib.util.find_spec(m) is None) or "-"
version = cuda = "-"
spec = importlib.util.find_spec("torch")
if spec is not None and spec.origin:
    v = runpy.run_path(os.path.join(os.path.dirname(spec.origin), "version.py"))
    version, cuda = v.get("__version__") or "-", v.get("cuda") or "-"
print(missing, version, cuda)
'
torch_version=- torch_cuda=-
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  problem "PYTHON=$PYTHON: not found; fix: PYTHON=/path/to/python (one with torch, numpy, tokenizers and Shoal's dependencies)"
elif ! probed=$("$PYTHON" -c "$PROBE" 2>&1) || ! read -r missing torch_version torch_cuda <<<"$probed"; then
  problem "PYTHON=$PYTHON: could not run it: $(tail -1 <<<"$probed"); fix: PYTHON=/path/to/a/working/python"
elif [[ "$missing" != "-" ]]; then
  problem "$PYTHON lacks: ${missing//,/ }; fix: $PYTHON -m pip install ${missing//,/ } (torch a CUDA build), or PYTHON=/path/to/a/python that has them"
fi

if (( ! DRY_RUN )); then
  dry="or check everything but the GPU on CPU: benchmarks/gpu.sh --dry-run"
  visible=0
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    problem "no NVIDIA GPU here: nvidia-smi is not on PATH; this benchmark needs one; fix: run it on a GPU machine (benchmarks/README.md), $dry"
  elif ! smi=$(nvidia-smi -L 2>&1); then
    problem "no NVIDIA GPU here: nvidia-smi -L failed: $(head -1 <<<"$smi"); fix: check the driver, $dry"
  else
    visible=$(grep -c '^GPU ' <<<"$smi" || true)
    (( visible > 0 )) || problem "no NVIDIA GPU here: nvidia-smi -L lists none; fix: check the driver, $dry"
  fi
  if (( visible > 0 && gpus_ok )); then
    if [[ -z "${GPUS:-}" ]]; then
      GPUS=$(( visible > 8 ? 8 : visible ))
    elif (( GPUS > visible )); then
      problem "GPUS=$GPUS: this machine has $visible GPU(s) (nvidia-smi -L); fix: GPUS=$visible, or unset GPUS for every GPU"
    fi
  fi
  if [[ "$torch_version" != "-" && "$torch_cuda" == "-" ]]; then
    problem "$PYTHON's torch $torch_version is a CPU-only build (torch.version.cuda is None); fix: install a CUDA build of torch (pip install torch --index-url https://download.pytorch.org/whl/cu126), or PYTHON=/path/to/a/python that has one"
  fi
  OUT=${OUT:-benchmarks/results}
else
  OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/shoal-gpu-dry-run-XXXXXX")}
fi

if (( ${#problems[@]} )); then
  printf 'gpu.sh: %s\n' "${problems[@]}" >&2
  echo "gpu.sh: ${#problems[@]} problem(s); nothing was run" >&2
  exit 2
fi

export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
settings="STEPS=$STEPS BATCH=$BATCH MODEL=$MODEL ROUNDS=$ROUNDS GPUS=$GPUS TIME_LIMIT=$TIME_LIMIT"
echo "gpu.sh: $settings$( (( DRY_RUN )) && echo ' (dry run, on CPU)'); results to $OUT"
# The phases keep to TIME_LIMIT themselves; `timeout` is the backstop should one hang.
exec timeout -k 10 $(( TIME_LIMIT + 30 )) "$PYTHON" benchmarks/_gpu_bench.py \
  --model "$MODEL" --steps "$STEPS" --batch "$BATCH" --rounds "$ROUNDS" --gpus "$GPUS" \
  --time-limit "$TIME_LIMIT" --out "$OUT" $( (( DRY_RUN )) && echo "--dry-run --max-files 30 --sizes-mib 1,8") \
  --command "$settings benchmarks/gpu.sh$( (( DRY_RUN )) && echo ' --dry-run')"
