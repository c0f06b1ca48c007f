#!/usr/bin/env bash
# Trains wan22-tiny on the GPU machine within a budget of minutes, evaluates it on the 40 held-out
# captions, and puts the weights, logs and evaluation into $OUT. Run from the repo root on the GPU
# machine, after a GPU build in build-gpu (scripts/gpu/build.sh):
#   scripts/gpu/train.sh [MINUTES] [VAE_SHARE]        e.g. scripts/gpu/train.sh 6 0.3
# MINUTES (default 6) covers both stages and the data preparation; VAE_SHARE (default 0.3) of it goes
# to stage 1 (the VAE), the rest to encoding the data set and stage 2 (the transformer). The evaluation
# runs after the budget (about a minute on the H200: 40 clips x 50 steps x 2 forwards).
# Extra training flags: TRAIN_ARGS="--batch 256 --scenes 8192" scripts/gpu/train.sh 6
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-train}
mkdir -p "$OUT"
minutes=${1:-6}
share=${2:-0.3}
seed=${SEED:-1}
[ -f .device-deps/env.sh ] && source .device-deps/env.sh
bin=build-gpu/autooptim
[ -x "$bin" ] || { echo "scripts/gpu/train.sh: $bin missing: build first (scripts/gpu/build.sh)" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.sm,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
dir=$OUT/wan22-tiny-trained
rm -rf "$dir"
echo "=== train ($(date -u +%H:%M:%S)): $minutes min, VAE share $share, seed $seed"
# shellcheck disable=SC2086
AUTOOPTIM_PROGRESS_SECONDS=10 $bin train --model wan22-tiny --out "$dir" --device cuda --seed "$seed" \
  --minutes "$minutes" --vae-share "$share" --vae-batch 32 --batch 256 --scenes 6144 --log-every 100 \
  --checkpoint-minutes 2 ${TRAIN_ARGS:-} 2>&1 | tee "$OUT/train.log"
rc=${PIPESTATUS[0]}
echo "train rc=$rc"
[ "$rc" -eq 0 ] || exit "$rc"
echo "=== eval ($(date -u +%H:%M:%S))"
$bin eval-tiny --model wan22-tiny --weights "$dir" --device cuda --dtype fp32 --captions 40 \
  --out "$OUT/eval-trained.json" --clips-dir "$OUT/eval-clips" 2>&1 | tail -45 | tee "$OUT/eval.log"
$bin eval-tiny --model wan22-tiny --synthetic-weights --device cuda --dtype fp32 --captions 40 \
  --out "$OUT/eval-synthetic.json" 2>&1 | tail -1 | tee -a "$OUT/eval.log"
$bin eval-tiny --truth --captions 40 --out "$OUT/eval-truth.json" 2>&1 | tail -1 | tee -a "$OUT/eval.log"
$bin eval-tiny --vae-roundtrip --model wan22-tiny --weights "$dir" --device cuda --captions 40 --out "$OUT/eval-vae-roundtrip.json" 2>&1 | tail -1 | tee -a "$OUT/eval.log"
# The shippable part: the checkpoint without train_state/ (optimiser moments, raw weights).
mkdir -p "$OUT/weights"
cp -r "$dir"/model_index.json "$dir"/transformer "$dir"/vae "$dir"/text_encoder "$dir"/tokenizer "$dir"/scheduler \
  "$dir"/train_info.json "$dir"/train_log.jsonl "$OUT/weights/"
(cd "$OUT/weights" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)
du -sh "$OUT/weights"
echo "=== done ($(date -u +%H:%M:%S))"
