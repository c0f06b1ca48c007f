#!/usr/bin/env bash
# One device call for the kernel tier (issue 11): build, the GPU kernel tests, then `bench --profile` at the
# official shape for the baseline and each kernel manifest, all in one machine session so that ratios are
# comparable. Results: $OUT/*.json and logs; a table at the end.
#   scripts/gpu/kernels.sh [build] [tests] [bench] [ablate] [vae]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build tests bench)
source .device-deps/env.sh
bin=build-gpu/autooptim
M=manifests/wan22-ti2v-5b
bench() {  # name manifest extra-args...
  local name=$1 man=$2; shift 2
  local margs=(); [ "$man" != none ] && margs=(--manifest "$man")
  $bin bench --model wan22-ti2v-5b --synthetic-weights "${margs[@]}" --steps 2 --repeat "${REPEAT:-3}" --profile "$@" \
    --json "$OUT/bench-$name.json" > /dev/null 2> "$OUT/bench-$name.log"
  echo "--- $name (rc=$?)"; grep -E "transformer forward|denoising step|vae_decode|self-attention|^  [a-z_]+ +[0-9.]+ ms" "$OUT/bench-$name.log" | head -30
}
for s in "${steps[@]}"; do
  echo "=== $s ($(date -u +%H:%M:%S))"
  case "$s" in
    build) bash scripts/gpu/build.sh build-gpu > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 2; }; tail -3 "$OUT/build.log" ;;
    tests) (cd build-gpu && ctest -R "Gpu" --output-on-failure > "$OUT/tests.log" 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed|FAILED|Expected|Which is|error" "$OUT/tests.log" | head -40) ;;
    bench)
      bench baseline none --skip-vae
      bench fused $M/kernel-fused.json --skip-vae
      bench fused-all $M/kernel-fused-all.json --skip-vae
      bench fp8 $M/quant-fp8.json --skip-vae
      bench fp8-fused $M/quant-fp8-fused.json --skip-vae ;;
    ablate)
      # Each fused switch alone, and the set without the GELU epilogue.
      d=$(mktemp -d)
      for sw in fused_norm_modulate fused_gate_residual fused_qk_norm_rope gelu_epilogue; do
        python3 -c "import json,sys; m=json.load(open('$M/kernel-fused.json')); m['flags']={'$sw': True}; json.dump(m, open('$d/$sw.json','w'))"
        bench "only-$sw" "$d/$sw.json" --skip-vae
      done
      python3 -c "import json; m=json.load(open('$M/kernel-fused.json')); del m['flags']['gelu_epilogue']; json.dump(m, open('$d/no-gelu.json','w'))"
      bench fused-no-gelu "$d/no-gelu.json" --skip-vae ;;
    sparse2)
      d=$(mktemp -d)
      for cw in 4:7 2:8 4:2 2:3; do
        c=${cw%:*}; w=${cw#*:}
        python3 -c "import json; m=json.load(open('$M/sparse-frame-window-50.json')); m['flags']['sparse'].update({'query_frames': $c, 'window_frames': $w}); json.dump(m, open('$d/c$c-w$w.json','w'))"
        bench "sparse-c$c-w$w" "$d/c$c-w$w.json" --skip-vae --at-step 20
      done ;;
    sparse)
      bench sparse-50 $M/sparse-frame-window-50.json --skip-vae --at-step 20
      bench sparse-25 $M/sparse-frame-window-25.json --skip-vae --at-step 20 ;;
    vae) REPEAT=1 bench vae-baseline none ;;
    *) echo "unknown step $s" ;;
  esac
done
# At most 8 files come back from a device call: pack the JSON and logs into one.
(cd "$OUT" && tar czf results.tgz --remove-files $(ls *.json *.log *.txt 2>/dev/null)) 2>/dev/null || true
