#!/usr/bin/env bash
# The GPU acceptance suite, one command on a machine with a CUDA GPU:
#
#   bash benchmarks/gpu_suite.sh [OUT_DIR]        (default: benchmarks/results/gpu-<date>)
#
# Runs `pytest -m gpu`; per job (packed 8x2k, single 16k; policies in /dev/shm, no checkpoint)
# the trainer with its defaults, the trainer with compile set the other way (for the compile's
# time and pay-off step) and the hand-written loop (benchmarks/handwritten_loop.py), then prints
# the side-by-side table with its checks (benchmarks/gpu_table.py); packed 8x2k with a
# checkpoint every 2 steps (publish and checkpoint on the timeline); and, where vLLM is
# installed, the weight-transfer benchmark. Every figure lands as JSON in OUT_DIR, each step's
# output in OUT_DIR/<step>.log, the table in OUT_DIR/table.log and table.json, and
# OUT_DIR/summary.json says which steps passed. A step that fails is recorded and the suite goes
# on; the exit code is the number of failed steps.
# Python: $PYTHON (default: python). Needs the trainer's packages only (benchmarks/README.md
# says how to carry pydantic & co. to a machine without a package index): so the gpu tests live
# in tests/unit/trainer, whose modules import nothing of vLLM, verifiers or the OpenAI client.
# The tests' tiny model is built with the bundled SmolLM2 tokenizer; where that package is
# missing, copy a built one (~/.cache/rl-launcher/tiny-qwen3-v1-seed0) under $RL_CACHE_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-benchmarks/results/gpu-$(date +%Y%m%d-%H%M%S)}"
PY="${PYTHON:-python}"
# the bundled environments' packages (rl_files & co.), which a copied tree has not installed
export PYTHONPATH="$PWD/environments${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
declare -A STATUS
failed=0

step() {  # step NAME COMMAND...: run it, log it, record pass/fail
    local name="$1"
    shift
    echo "== $name: $*"
    local start=$SECONDS
    if "$@" >"$OUT/$name.log" 2>&1; then
        STATUS[$name]="passed in $((SECONDS - start)) s"
    else
        STATUS[$name]="FAILED (exit $?) after $((SECONDS - start)) s: see $name.log"
        failed=$((failed + 1))
    fi
    echo "   ${STATUS[$name]}"
}

if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_suite: $PY sees no CUDA GPU (or has no torch): run it on the GPU machine" >&2
    exit 2
fi
"$PY" - >"$OUT/machine.json" <<'PYEOF'
import json, platform, torch
p = torch.cuda.get_device_properties(0)
print(json.dumps({"gpu": p.name, "gpus": torch.cuda.device_count(),
                  "memory_gib": round(p.total_memory / 2**30, 1), "torch": torch.__version__,
                  "cuda": torch.version.cuda, "python": platform.python_version()}))
PYEOF

step pytest-gpu "$PY" -m pytest -m gpu -p no:cacheprovider -q -o addopts="--strict-markers" \
    --junitxml="$OUT/pytest-gpu.xml" tests/unit/trainer
TRAINER=(benchmarks/trainer_throughput.py --steps 5 --ckpt-interval 1000 --weights-dir /dev/shm
         --peak-tflops 989)
for job in packed-8x2k single-16k; do
    step "ours-$job" "$PY" "${TRAINER[@]}" --preset "$job" --json "$OUT/ours-$job.json"
    # compile set the other way from what the defaults chose, for its time and pay-off step
    other=$("$PY" benchmarks/gpu_table.py --other-compile "$OUT/ours-$job.json" || echo --compile)
    step "ours-other-$job" "$PY" "${TRAINER[@]}" --preset "$job" "$other" \
        --json "$OUT/ours-other-$job.json"
    step "hand-$job" "$PY" benchmarks/handwritten_loop.py --preset "$job" --steps 5 \
        --json "$OUT/hand-$job.json"
done
# Publish and checkpoint on the step's timeline: a checkpoint every 2 steps, policies on disk
step packed-8x2k-ckpt "$PY" benchmarks/trainer_throughput.py --preset packed-8x2k --steps 5 \
    --peak-tflops 989 --json "$OUT/packed-8x2k-ckpt.json"
if "$PY" -c "import vllm" 2>/dev/null; then
    step weight-transfer "$PY" benchmarks/weight_transfer.py  # writes results/weight_transfer.json
    cp benchmarks/results/weight_transfer.json "$OUT/weight-transfer.json" 2>/dev/null
else
    STATUS[weight-transfer]="skipped: vllm is not installed for $PY"
fi

step table "$PY" benchmarks/gpu_table.py "$OUT"  # the side-by-side table and its checks
cat "$OUT/table.log"
{
    echo "{"
    first=1
    for name in "${!STATUS[@]}"; do
        [ $first -eq 1 ] || echo ","
        first=0
        printf '  "%s": "%s"' "$name" "${STATUS[$name]}"
    done
    echo ""
    echo "}"
} >"$OUT/summary.json"
echo "gpu_suite: $failed step(s) failed; figures and logs in $OUT"
exit "$failed"
