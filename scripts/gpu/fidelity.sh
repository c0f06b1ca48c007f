#!/usr/bin/env bash
# How faithful each manifest's clip is, against the float32 clip of the same seed and prompt as well as
# against the bf16 baseline's: generated at the reduced configuration of quality.sh (33 frames, 480x832,
# 20 steps), synthetic weights. The gate's lossless claim is >= 50 dB against the bf16 baseline; this
# says whether a switch that misses it is further from float32 than the baseline is, or only rounds
# differently (a random model amplifies any change in the last bit over 20 steps).
#   scripts/gpu/fidelity.sh MANIFEST...   (default: kernel-cudnn-attention kernel-fused-all kernel-hopper)
# Results: $OUT/fidelity.txt; the clips (Y4M) under /tmp/fidelity, not brought back.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
source .device-deps/env.sh
source scripts/gpu/reduced.sh
bin=build-gpu/autooptim
ms=("$@")
[ ${#ms[@]} -eq 0 ] && ms=(kernel-cudnn-attention kernel-fused-all kernel-hopper)
w=/tmp/fidelity
rm -rf "$w"; mkdir -p "$w/manifests"
# The first validation prompt (the one quality.sh's gate uses).
prompt=$(python3 -c "import json; print(json.loads(open('prompts/visible.jsonl').readline())['prompt'])") || exit 2
reduce() {  # manifest name -> the reduced copy's path
  reduce_manifest "manifests/wan22-ti2v-5b/$1.json" "$w/manifests/$1.json" && echo "$w/manifests/$1.json"
}
gen() {  # name manifest-name extra-args...
  local name=$1 man; man=$(reduce "$2"); shift 2
  $bin generate --model wan22-ti2v-5b --synthetic-weights --manifest "$man" --prompt "$prompt" --out "$w/$name.y4m" "$@" \
    > "$OUT/generate-$name.log" 2>&1
  echo "--- $name (rc=$?): $(grep -E "denoised|wrote|error|Error" "$OUT/generate-$name.log" | tail -2 | tr '\n' ' ')"
}
gen fp32-baseline control-fp32  # the baseline in float32 (its manifest's dtype flag)
gen baseline baseline
clips=()
for m in "${ms[@]}"; do gen "$m" "$m"; clips+=("$w/$m.y4m"); done
{
  echo "prompt: $prompt"
  echo "against float32:"
  python3 scripts/gpu/clip_psnr.py "$w/fp32-baseline.y4m" "$w/baseline.y4m" "${clips[@]}"
  echo "against the bf16 baseline:"
  python3 scripts/gpu/clip_psnr.py "$w/baseline.y4m" "${clips[@]}"
} | tee "$OUT/fidelity.txt"
