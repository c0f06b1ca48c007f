#!/usr/bin/env bash
# The quality side of the kernel, quant and sparse manifests on the GPU: each gated at a reduced
# configuration (so that a clip takes seconds; official_config fails by design there) against the
# baseline on one validation prompt, printing the gate's checks and the worst PSNR. Synthetic weights:
# PSNR against the baseline measures how far a switch moves the output, not image quality.
#   scripts/gpu/quality.sh MANIFEST...   (default: kernel-fused-all, kernel-hopper, quant-fp8, a sparse one;
#   only-SWITCH and lossless-NAME as below)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
source .device-deps/env.sh
source scripts/gpu/reduced.sh
bin=build-gpu/autooptim
ms=("$@")
[ ${#ms[@]} -eq 0 ] && ms=(kernel-fused-all kernel-hopper quant-fp8 sparse-frame-window-25)
md=$(mktemp -d)/manifests
mkdir -p "$md/wan22-ti2v-5b"
for f in manifests/wan22-ti2v-5b/*.json; do reduce_manifest "$f" "$md/wan22-ti2v-5b/$(basename "$f")"; done
# only-SWITCH: the kernel-fused manifest with that one switch. lossless-NAME: manifest NAME claiming
# losslessness (the gate then asks for 50 dB, or the precision floor: as close to the fp32 control as the
# baseline is).
for m in "${ms[@]}"; do
  case "$m" in
    only-*)
      python3 -c "import json; m=json.load(open('$md/wan22-ti2v-5b/kernel-fused.json')); m['id']='wan22-ti2v-5b/$m'; m['flags']={'${m#only-}': True}; json.dump(m, open('$md/wan22-ti2v-5b/$m.json','w'))" ;;
    lossless-*)
      python3 -c "import json; m=json.load(open('$md/wan22-ti2v-5b/${m#lossless-}.json')); m['id']='wan22-ti2v-5b/$m'; m['lossless']=True; json.dump(m, open('$md/wan22-ti2v-5b/$m.json','w'))" ;;
  esac
done
for m in "${ms[@]}"; do
  # The pinned baseline at the same reduced configuration (without it the gate runs it at the official one).
  $bin gate --model wan22-ti2v-5b --synthetic-weights --manifest "$md/wan22-ti2v-5b/$m.json" \
    "${REDUCED_GATE_ARGS[@]}" \
    --split val --max-prompts ${PROMPTS:-1} --repeats 1 --out "/tmp/gate-$m" > "$OUT/gate-$m.txt" 2> "$OUT/gate-$m.log"
  echo "--- $m (rc=$?)"; cat "$OUT/gate-$m.txt"
done
