#!/usr/bin/env bash
# Trains wan22-tiny on the GPU machine within a budget of minutes, evaluates it on the 40 held-out
# captions, and puts the weights, logs and evaluation into $OUT. Run from the repo root on the GPU
# machine, after a GPU build in build-gpu (scripts/gpu/build.sh):
#   scripts/gpu/train.sh [MINUTES] [VAE_SHARE]        e.g. scripts/gpu/train.sh 6 0.45
# MINUTES (default 6) is the training budget: both stages and the data preparation (rendering and
# encoding the stage-2 data set, ~0.5 min). VAE_SHARE (default 0.45) of it goes to stage 1 (the VAE),
# the rest to stage 2 (the transformer). The evaluations take ~2 more minutes.
#
# A device command may run 10 minutes at most: this call trains at most SESSION minutes (default 7)
# and then stops checkpointed; the run folder (out/wan22-tiny-train, kept on the warm machine) is
# resumed by the next call with the same MINUTES (FRESH=1 starts over). The evaluation runs once the
# budget is spent. E.g. a 12-minute training: `scripts/gpu/train.sh 12 0.45` twice. A finished run
# resumed with a larger MINUTES trains the transformer further (stage 1 is not reopened).
# Stage 1 trains a VAE with an 8-channel decoder (the tiny architecture's 4 did not learn the object on
# the CPU; the loader accepts a wider VAE) on whole 49-frame clips; 5 minutes give a round trip that passes
# every held-out clip (docs/journal/2026-12-03.md, night). Stage 2 is then what limits the score (check
# eval.log: the round trip must be well above chance before the transformer's score means anything).
# The two calls must follow each other at once: a released machine loses out/ and with it the run.
# VAE_FROM=DIR skips stage 1 and takes the VAE of that checkpoint folder (carried; e.g. the 2026-12-03 night
# run's weights, round trip 100%): all of MINUTES go to the transformer.
# DIT_FROM=DIR starts the transformer from that checkpoint folder's (trains it further; with VAE_FROM=DIR
# the same folder continues an earlier run as a whole; train_info.json adds up both runs' minutes).
# BATCH (default 256) is the transformer batch, SCENES (default 6144) the data set's scenes; SKIP_ROUNDTRIP=1 and
# SKIP_SYNTHETIC=1 leave out the VAE round trip and the untrained model's evaluations (for continued runs). Extra training flags: TRAIN_ARGS="--lr 2e-4" scripts/gpu/train.sh 6
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-train}
mkdir -p "$OUT"
minutes=${1:-6}
share=${2:-0.45}
session=${SESSION:-7}
seed=${SEED:-1}
[ -f .device-deps/env.sh ] && source .device-deps/env.sh
bin=build-gpu/autooptim
[ -x "$bin" ] || { echo "scripts/gpu/train.sh: $bin missing: build first (scripts/gpu/build.sh)" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.sm,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
dir=${RUN_DIR:-out/wan22-tiny-train}  # RUN_DIR: another run folder, e.g. for a second variant trained alongside
tag=$(basename "$dir")
start=()  # --resume, or --vae-from for a new run
if [ "${FRESH:-0}" = 1 ]; then rm -rf "$dir"; fi
if [ -f "$dir/train_state/state.json" ]; then start=(--resume); echo "resuming $dir"; else
  rm -rf "$dir"
  [ -n "${VAE_FROM:-}" ] && start=(--vae-from "$VAE_FROM")
  [ -n "${DIT_FROM:-}" ] && start+=(--transformer-from "$DIT_FROM")
fi
mkdir -p out
echo "=== train ($(date -u +%H:%M:%S)): budget $minutes min, VAE share $share, this call at most $session min, seed $seed"
# Stage 1 on whole 49-frame clips (13 latent frames): a VAE trained on 9-frame windows (3 latent frames)
# decoded the first 9 frames well and drifted into noise after frame 12 (docs/journal/2026-12-03.md,
# evening): the causal caches must be trained over as many chunks as the clips have.
# shellcheck disable=SC2086
AUTOOPTIM_PROGRESS_SECONDS=10 $bin train --model wan22-tiny --out "$dir" "${start[@]}" --device cuda --seed "$seed" \
  --minutes "$minutes" --vae-share "$share" --session-minutes "$session" \
  --vae-batch 16 --vae-frames 49 --vae-decoder-width 8 --batch "${BATCH:-256}" --scenes "${SCENES:-6144}" --log-every 100 --checkpoint-minutes 2 \
  ${TRAIN_ARGS:-} 2>&1 | tee -a "$OUT/train.log"
rc=${PIPESTATUS[0]}
echo "train rc=$rc"
cp "$dir"/train_log.jsonl "$OUT/" 2>/dev/null
if [ "$rc" -eq 3 ]; then
  echo "training not finished (budget $minutes min): call scripts/gpu/train.sh $minutes $share again to continue"
  exit 0
fi
[ "$rc" -eq 0 ] || exit "$rc"
# First (a call cut short still brings them back), the shippable part: the checkpoint without train_state/ (optimiser moments, raw weights).
mkdir -p "$OUT/weights"
cp -r "$dir"/model_index.json "$dir"/transformer "$dir"/vae "$dir"/text_encoder "$dir"/tokenizer "$dir"/scheduler \
  "$dir"/train_info.json "$dir"/train_log.jsonl "$OUT/weights/"
(cd "$OUT/weights" && find . -type f ! -name SHA256SUMS | sort | xargs sha256sum > SHA256SUMS)
du -sh "$OUT/weights"
# One file (the device returns a few files only): weights.tgz.
tar czf "$OUT/weights.tgz" -C "$OUT" weights && rm -rf "$OUT/weights"
echo "=== eval ($(date -u +%H:%M:%S))"
$bin eval-tiny --model wan22-tiny --weights "$dir" --device cuda --dtype fp32 --captions 40 \
  --out "$OUT/eval-trained.json" --clips-dir "/tmp/autooptim-eval-clips-$tag" 2>&1 | tail -45 | tee "$OUT/eval.log"
[ "${SKIP_ROUNDTRIP:-0}" = 1 ] || $bin eval-tiny --vae-roundtrip --model wan22-tiny --weights "$dir" --device cuda --captions 40 \
  --out "$OUT/eval-vae-roundtrip.json" --clips-dir "/tmp/autooptim-roundtrip-$tag" 2>&1 | tail -1 | tee -a "$OUT/eval.log"
[ "${SKIP_SYNTHETIC:-0}" = 1 ] || $bin eval-tiny --model wan22-tiny --synthetic-weights --device cuda --dtype fp32 --captions 40 \
  --out "$OUT/eval-synthetic.json" 2>&1 | tail -1 | tee -a "$OUT/eval.log"
$bin eval-tiny --truth --captions 40 --out "$OUT/eval-truth.json" 2>&1 | tail -1 | tee -a "$OUT/eval.log"
# Only a few side-by-side round-trip frames come back (the first clip's).
find "/tmp/autooptim-roundtrip-$tag" -mindepth 1 -maxdepth 1 -type d ! -name roundtrip_0 -exec rm -rf {} + 2>/dev/null
echo "=== done ($(date -u +%H:%M:%S))"
