#!/usr/bin/env bash
# One device call for the kernel tier (issue 11): build, the GPU kernel tests, then `bench --profile` at the
# official shape for the baseline and each kernel manifest, all in one machine session so that ratios are
# comparable. Results: $OUT/*.json and logs; a table at the end.
#   scripts/gpu/kernels.sh [build] [tests] [probe] [hopper] [stack] [bench] [headline] [ablate] [sparse] [sparse2] [topk] [topk-chunks] [vae] [vae-switches] [cache] [detail] [forward-sets]
#   (env: DEADLINE seconds, STEPS, REPEAT, HEAD, VAE_SETS for vae-switches, PROFILE_DETAIL=1 for --profile-detail,
#    HOPPER: the hopper_attention variant for stack, GPU_TESTS_EXCLUDE: a ctest -E pattern for the tests step, GateGpu by default)
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
  $bin bench --model wan22-ti2v-5b --synthetic-weights "${margs[@]}" --steps "${STEPS:-2}" --repeat "${REPEAT:-3}" --profile ${PROFILE_DETAIL:+--profile-detail} "$@" \
    --json "$OUT/bench-$name.json" > /dev/null 2> "$OUT/bench-$name.log"
  echo "--- $name (rc=$?)"; grep -E "transformer forward|denoising step|vae_decode|self-attention|^  [a-z_]+ +[0-9.]+ ms|^    [a-z_]+: |error|Error" "$OUT/bench-$name.log" | head -${HEAD:-40}
}
fastest_variant() {  # log: the hopper_attention variant with the shortest time on the fused QKV rows
  grep "fused QKV rows: hopper_attention" "$1" | sed -E 's/.*hopper_attention ([0-9]) ([0-9.]+) ms.*/\1 \2/' | sort -k2 -n | head -1 | cut -d' ' -f1
}
derive() {  # source destination statements: destination = the source manifest after the Python statements on m
  python3 -c "import json; m=json.load(open('$1')); $3; json.dump(m, open('$2', 'w'))"
}
for s in "${steps[@]}"; do
  # DEADLINE (seconds since the start): later steps are skipped so that what ran still comes back.
  if [ -n "${DEADLINE:-}" ] && [ "$SECONDS" -gt "$DEADLINE" ]; then echo "=== $s skipped: past DEADLINE=$DEADLINE s"; continue; fi
  echo "=== $s ($(date -u +%H:%M:%S))"
  case "$s" in
    build) bash scripts/gpu/build.sh build-gpu > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 2; }; tail -3 "$OUT/build.log" ;;
    # GateGpu (a full-size gate, ~4 min) only when GPU_TESTS_EXCLUDE is set to something else (e.g. none).
    tests) (cd build-gpu && ctest -R "Gpu" -E "${GPU_TESTS_EXCLUDE:-GateGpu}" --timeout 180 --output-on-failure > "$OUT/tests.log" 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed|FAILED|Expected|Which is|error|rel L2|with every switch|transposed" "$OUT/tests.log" | head -40) ;;
    bench)
      bench baseline none --skip-vae
      bench fused $M/kernel-fused.json --skip-vae
      bench fused-all $M/kernel-fused-all.json --skip-vae
      bench fp8 $M/quant-fp8.json --skip-vae
      bench fp8-fused $M/quant-fp8-fused.json --skip-vae ;;
    probe)
      # The attention kernel alone (tests/hopper_attention_probe.cu, built by nvcc in seconds, no libtorch):
      # each variant against a float64 reference on small and odd shapes, then timed at the official shape.
      bash scripts/gpu/hopper-probe.sh ${PROBE_ARGS:-} > "$OUT/probe.log" 2>&1
      rc=$?; echo "probe rc=$rc"; grep -vE "^  variant" "$OUT/probe.log" | head -60; grep -E "^  variant" "$OUT/probe.log" | head -30
      # The fastest variant on this machine, for a later stack step, when every check passed.
      if [ $rc -eq 0 ]; then
        mkdir -p build-gpu
        fastest_variant "$OUT/probe.log" > build-gpu/hopper-best
      fi ;;
    hopper)
      # hopper_attention: its GPU tests first (odd shapes against float32, then the official shape against
      # cuDNN with each variant's time), under a timeout in case a pipeline barrier deadlocks; then the
      # forward with kernel-fused-all + the fastest variant on the fused QKV rows (or HOPPER_VARIANTS)
      # beside kernel-fused-all.
      timeout 120 build-gpu/tests/runtime_tests --gtest_filter='GpuKernels.HopperAttention*' > "$OUT/hopper-tests.log" 2>&1
      echo "hopper tests rc=$?"
      grep -E "official shape|diagnostics|^\[  (FAILED|PASSED|  OK) |Expected|Which is|libtorch's kernel|error" "$OUT/hopper-tests.log" | head -90
      if grep -q "FAILED" "$OUT/hopper-tests.log" || ! grep -q "PASSED" "$OUT/hopper-tests.log"; then
        echo "hopper: the kernel is not right yet; no forward timings"
      else
        d=$(mktemp -d)
        bench fused-all $M/kernel-fused-all.json --skip-vae
        best=$(fastest_variant "$OUT/hopper-tests.log")
        echo "$best" > build-gpu/hopper-best  # for a later stack step on the same machine
        for v in ${HOPPER_VARIANTS:-$best}; do
          derive "$M/kernel-fused-all.json" "$d/h$v.json" "m['flags']['hopper_attention']=$v"
          bench "fused-all-hopper$v" "$d/h$v.json" --skip-vae
        done
      fi ;;
    stack)
      # The lossless stack with HOPPER (a hopper_attention variant; 0 leaves it out; by default the fastest
      # of the probe or hopper step on this machine) and uniform_timestep, in one machine session, the
      # comparisons that decide the manifests first: kernel-fused-all without and with both, kernel-all
      # without and with both, the baseline, then uniform_timestep on each and alone (HOPPER=0: only
      # uniform_timestep's comparisons).
      d=$(mktemp -d); h=${HOPPER:-$(cat build-gpu/hopper-best 2>/dev/null || echo 0)}
      echo "stack: hopper_attention variant ${h}"
      derive "$M/kernel-all.json" "$d/all-u.json" "m['flags']['uniform_timestep']=True"
      derive "$M/kernel-all.json" "$d/all-u-h.json" "m['flags'].update(uniform_timestep=True, hopper_attention=$h)"
      derive "$M/kernel-fused-all.json" "$d/fused-u.json" "m['flags']['uniform_timestep']=True"
      derive "$M/kernel-fused-all.json" "$d/fused-u-h.json" "m['flags'].update(uniform_timestep=True, hopper_attention=$h)"
      derive "$M/kernel-all.json" "$d/u.json" "m['flags']={'uniform_timestep': True}"
      bench fused-all $M/kernel-fused-all.json --skip-vae
      [ "$h" != 0 ] && bench "fused-all-uniform-hopper$h" "$d/fused-u-h.json" --skip-vae
      bench kernel-all $M/kernel-all.json --skip-vae
      [ "$h" != 0 ] && bench "kernel-all-uniform-hopper$h" "$d/all-u-h.json" --skip-vae
      bench baseline none --skip-vae
      bench fused-all-uniform "$d/fused-u.json" --skip-vae
      bench kernel-all-uniform "$d/all-u.json" --skip-vae
      bench uniform "$d/u.json" --skip-vae ;;
    headline)
      # The baseline and the forward manifests in one machine session, for same-session ratios.
      bench baseline none --skip-vae
      bench fused-all $M/kernel-fused-all.json --skip-vae
      bench hopper $M/kernel-hopper.json --skip-vae
      bench fp8-fused $M/quant-fp8-fused.json --skip-vae
      bench fp8-hopper $M/quant-fp8-hopper.json --skip-vae ;;
    ablate)
      # Each fused switch alone, and the set without the GELU epilogue.
      d=$(mktemp -d)
      for sw in fused_norm_modulate fused_gate_residual fused_qk_norm_rope gelu_epilogue; do
        derive "$M/kernel-fused.json" "$d/$sw.json" "m['flags']={'$sw': True}"
        bench "only-$sw" "$d/$sw.json" --skip-vae
      done
      derive "$M/kernel-fused.json" "$d/no-gelu.json" "del m['flags']['gelu_epilogue']"
      bench fused-no-gelu "$d/no-gelu.json" --skip-vae ;;
    sparse2)
      d=$(mktemp -d)
      for cw in 4:7 2:8 4:2 2:3; do
        c=${cw%:*}; w=${cw#*:}
        derive "$M/sparse-frame-window-50.json" "$d/c$c-w$w.json" "m['flags']['sparse'].update({'query_frames': $c, 'window_frames': $w})"
        bench "sparse-c$c-w$w" "$d/c$c-w$w.json" --skip-vae --at-step 20
      done ;;
    detail)
      # Where the time goes by operation (each GEMM and conv shape, self vs cross attention, the
      # embeddings): the baseline, the lossless kernel set, the FP8 set and the VAE's best switch set.
      HEAD=200 bench detail-baseline none --skip-vae --profile-detail
      HEAD=200 bench detail-fused-all $M/kernel-fused-all.json --skip-vae --profile-detail
      HEAD=200 bench detail-fp8-fused $M/quant-fp8-fused.json --skip-vae --profile-detail
      HEAD=200 REPEAT=1 bench detail-vae none --vae-only --profile-detail --vae-manifest $M/kernel-vae.json ;;
    forward-sets)
      # The kernel set with and without the fused cross-attention norms (fused_cross_norm: norm2 and the
      # cross residual add + the FFN's norm/modulation, each one pass), then also with the GEMMs' cuBLASLt
      # algorithms tuned per shape (gemm_autotune), and the FP8 set with the fused norms.
      d=$(mktemp -d)
      derive "$M/kernel-fused-all.json" "$d/cross.json" "m['id']='wan22-ti2v-5b/fused-all-cross'; m['flags']['fused_cross_norm']=True"
      derive "$M/kernel-fused-all.json" "$d/tuned.json" "m['id']='wan22-ti2v-5b/fused-all-cross-tuned'; m['flags'].update(fused_cross_norm=True, gemm_autotune=True)"
      derive "$M/quant-fp8-fused.json" "$d/fp8-cross.json" "m['id']='wan22-ti2v-5b/fp8-fused-cross'; m['flags']['fused_cross_norm']=True"
      HEAD=80 bench fused-all $M/kernel-fused-all.json --skip-vae
      HEAD=80 bench fused-all-cross "$d/cross.json" --skip-vae
      HEAD=80 bench fused-all-cross-tuned "$d/tuned.json" --skip-vae
      HEAD=80 bench fp8-fused-cross "$d/fp8-cross.json" --skip-vae ;;
    sparse)
      bench sparse-50 $M/sparse-frame-window-50.json --skip-vae --at-step 20
      bench sparse-25 $M/sparse-frame-window-25.json --skip-vae --at-step 20 ;;
    vae) REPEAT=1 bench vae-baseline none ;;
    vae-switches)
      # Every VAE switch and their sets, in one process against one fp32 decode of the same latents.
      d=$(mktemp -d); vm=()
      for set in ${VAE_SETS:-bf16 bf16,causal bf16,cl bf16,cl,causal bf16,cl,causal,fused bf16,cl,subpixel bf16,causal,fused,subpixel bf16,cl,causal,fused,subpixel}; do
        python3 - "$M/kernel-vae.json" "$d/vae-${set//,/-}.json" "$set" <<'PY'
import json, sys
names = {"bf16": "vae_bf16", "cl": "vae_channels_last", "causal": "vae_causal_buffer", "fused": "vae_fused_norm_silu",
         "subpixel": "vae_subpixel_upsample", "short": "vae_fused_shortcut", "tune": "vae_cudnn_benchmark",
         "frames": "vae_frame_convs", "transposed": "vae_transposed_upsample", "gemm": "vae_pointwise_gemm",
         "graph": "vae_cuda_graph"}
m = json.load(open(sys.argv[1]))
m["id"] = "wan22-ti2v-5b/vae-" + sys.argv[3].replace(",", "-")
# chunkN: vae_chunk_frames N; headN: vae_head_pad N; ringN: vae_causal_ring N
ints = {"chunk": "vae_chunk_frames", "head": "vae_head_pad", "ring": "vae_causal_ring"}
keys = sys.argv[3].split(",")
num = lambda k: next((p for p in ints if k.startswith(p) and k[len(p):].isdigit()), None)
m["flags"] = {names[k]: True for k in keys if not num(k)}
m["flags"].update({ints[num(k)]: int(k[len(num(k)):]) for k in keys if num(k)})
json.dump(m, open(sys.argv[2], "w"))
PY
        vm+=(--vae-manifest "$d/vae-${set//,/-}.json")
      done
      HEAD=200 REPEAT=2 bench vae-switches none --vae-only "${vm[@]}" ;;
    cache)
      # A cache's speed at the official shape at a given forward-skip ratio: forced skip schedules over
      # 10 steps (the first and last always computed), against the same 10 steps without skips.
      d=$(mktemp -d)
      STEPS=10 REPEAT=1 bench steps10 none --skip-vae
      for sched in 2,4,6,8 2,3,5,7,8 1,2,3,5,6,7,8; do
        python3 - "$M/kernel-fused.json" "$d/skip-${sched//,/-}.json" "$sched" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["id"] = "wan22-ti2v-5b/forced-skip-" + sys.argv[3].replace(",", "-")
m["family"] = "cache"
m["flags"] = {"forced_skip": {"steps": [int(x) for x in sys.argv[3].split(",")]}}
json.dump(m, open(sys.argv[2], "w"))
PY
        STEPS=10 REPEAT=1 bench "skip-${sched//,/-}" "$d/skip-${sched//,/-}.json" --skip-vae
      done ;;
    topk)
      bench topk-50 $M/sparse-topk-50.json --skip-vae --at-step 20
      bench topk-25 $M/sparse-topk-25.json --skip-vae --at-step 20 ;;
    topk-chunks)
      # topk_blocks with query chunks of 2 and 4 latent frames (one-frame chunks underfill the GPU).
      d=$(mktemp -d)
      for kq in 25:2 25:4 50:4; do
        k=${kq%:*}; q=${kq#*:}
        derive "$M/sparse-topk-$k.json" "$d/k$k-q$q.json" "m['flags']['sparse']['query_frames']=$q"
        bench "topk-$k-q$q" "$d/k$k-q$q.json" --skip-vae --at-step 20
      done ;;
    *) echo "unknown step $s" ;;
  esac
done
# At most 8 files come back from a device call: pack the JSON and logs into one.
(cd "$OUT" && tar czf results.tgz --remove-files $(ls *.json *.log *.txt 2>/dev/null)) 2>/dev/null || true
