#!/usr/bin/env bash
# The kernel tier's lossless claim on trained weights: kernel-fused-all's switches that take any head size
# (the fused block kernels, the GELU epilogue, fused QKV, the cross K/V cache; not hopper_attention, which
# needs head_dim 128) gated on the trained wan22-tiny on the GPU against its bf16 baseline, at its official
# configuration. Any change of rounding lands below the 50 dB rule against a bf16 baseline (synthetic
# TI2V-5B ~44-45 dB, this model ~47-48 dB); the gate then judges the claim by its precision floor (the fp32
# control: docs/gate-defences.md). Accepted on an H100 (docs/journal/2026-12-05.md, sixth session).
#   scripts/gpu/tiny-lossless.sh [build]   (build: the autooptim binary alone, for a short call)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
source .device-deps/env.sh
if [ "${1:-}" = build ]; then
  BUILD_TARGET=autooptim bash scripts/gpu/build.sh build-gpu > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 2; }
fi
m=$(mktemp -d)/kernel-fused.json
python3 - manifests/wan22-tiny/baseline.json "$m" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m.update({"id": "wan22-tiny/kernel/fused", "kind": "patch", "family": "kernel", "base": m["id"], "lossless": True,
          "description": "kernel-fused-all's switches for any head size, on the trained tiny model"})
m["flags"].update({k: True for k in ["fused_norm_modulate", "fused_gate_residual", "fused_qk_norm_rope", "gelu_epilogue",
                                     "fused_cross_norm", "fused_qkv", "cross_kv_cache"]})
json.dump(m, open(sys.argv[2], "w"), indent=2)
PY
# lossless: true, so the quality gate asks for the 50 dB and the SSIM 0.999 of a lossless claim.
build-gpu/autooptim gate --model wan22-tiny --device cuda --manifest "$m" --split val --max-prompts ${PROMPTS:-4} \
  --repeats 1 --out /tmp/tiny-lossless > "$OUT/tiny-lossless.txt" 2> "$OUT/tiny-lossless.log"
echo "--- gate (rc=$?)"; cat "$OUT/tiny-lossless.txt"; grep -E "error|Error" "$OUT/tiny-lossless.log" | head -5
