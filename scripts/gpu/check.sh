#!/usr/bin/env bash
# One device call's worth of GPU work: build, golden checks on the GPU (fp32 and bf16), the GPU tests,
# then the benchmarks. Results land in $OUT (JSON + logs). Steps can be chosen:
#   scripts/gpu/check.sh [build] [verify] [tests] [bench] [bench-fp32] [bench-kernel] [bench-graph] [bench-full] [run]
#                        [plugin-run]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build verify tests bench)
# The deps travel packed (.device-deps.txz, scripts/gpu/pack-deps.sh: a third of the size, so the tree and
# its golden vectors fit the device's carry limit): unpacked here on first use.
[ -f .device-deps/env.sh ] || [ ! -f .device-deps.txz ] || tar xJf .device-deps.txz
source .device-deps/env.sh
bin=build-gpu/autooptim
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
for s in "${steps[@]}"; do
  echo "=== $s ($(date -u +%H:%M:%S))"
  case "$s" in
    build) bash scripts/gpu/build.sh build-gpu || exit 2 ;;
    verify)
      $bin verify --golden tests/data/golden --device cuda --dtype fp32 --json > "$OUT/verify-fp32.json"; echo "fp32 rc=$?"
      $bin verify --golden tests/data/golden --device cuda --dtype bf16 | tee "$OUT/verify-bf16.txt" | tail -3; echo "bf16 rc=${PIPESTATUS[0]}"
      $bin verify --golden tests/data/golden_a14b --device cuda --dtype fp32 | tee "$OUT/verify-a14b.txt" | tail -2; echo "a14b fp32 rc=${PIPESTATUS[0]}" ;;
    tests)  # every GPU test (43): the whole gate first, the longest (about 250 s on an H100)
      (cd build-gpu && ctest -R "GateGpu" --output-on-failure 2>&1 | grep -E "tests passed|Failed|\*\*\*|Expected|Which is" | tail -15
       ctest -R "Gpu|Cuda|TechniquePoints|ExtensionPoints" -E "GateGpu" --output-on-failure 2>&1 |
         grep -E "tests passed|Failed|\*\*\*|Expected|Which is" | tail -30) ;;
    bench)
      $bin bench --model wan22-ti2v-5b --synthetic-weights --steps 2 --repeat 3 --json "$OUT/bench-bf16.json" 2>&1 | grep -v '^ ' | tail -12 ;;
    bench-fp32)
      $bin bench --model wan22-ti2v-5b --synthetic-weights --dtype fp32 --steps 2 --repeat 2 --json "$OUT/bench-fp32.json" 2>&1 | grep -v '^ ' | tail -8 ;;
    bench-kernel)
      for m in kernel-cudnn-attention kernel-all; do
        $bin bench --model wan22-ti2v-5b --synthetic-weights --manifest manifests/wan22-ti2v-5b/$m.json --steps 2 --repeat 3 --skip-vae \
          --json "$OUT/bench-$m.json" 2>&1 | grep -E "forward|step" | tail -3
      done ;;
    bench-graph)
      # CUDA graphs at the official shape and at the reduced run's shape (launch-bound), same process each.
      for m in baseline kernel-cuda-graph kernel-all; do
        $bin bench --model wan22-ti2v-5b --synthetic-weights --manifest manifests/wan22-ti2v-5b/$m.json --steps 4 --repeat 3 --skip-vae \
          --json "$OUT/bench-official-$m.json" 2>&1 | grep -E "forward|step" | tail -3
      done
      for m in baseline kernel-cuda-graph kernel-all; do
        $bin bench --model wan22-ti2v-5b --synthetic-weights --manifest manifests/wan22-ti2v-5b/$m.json --steps 6 --repeat 5 --skip-vae \
          --frames 17 --height 256 --width 448 --json "$OUT/bench-reduced-$m.json" 2>&1 | grep -E "forward|step" | tail -3
      done ;;
    bench-full)
      $bin bench --model wan22-ti2v-5b --synthetic-weights --steps 2 --repeat 1 --skip-vae --full-generation --json "$OUT/bench-full.json" 2>&1 | grep -v '^ ' | tail -8 ;;
    run)
      $bin run --model wan22-ti2v-5b --synthetic-weights --out "$OUT/run" --frames 17 --steps 12 --height 256 --width 448 \
        --budget-minutes 7 --budget-trials 14 --max-prompts 2 --repeats 2 2>&1 | tail -20 ;;
    plugin-run)  # run --agent with an agent that writes a plugin (no bwrap here: unsandboxed); the executor's log kept
      rm -rf plugin-run-*
      PLUGIN_RUN_UNSANDBOXED=1 KEEP=1 timeout 400 bash tests/agents/test_plugin_run.sh "$bin" . 2>&1 | tail -8
      d=$(ls -d plugin-run-* 2>/dev/null | head -1)
      [ -n "$d" ] && cp "$d/run.log" "$d/run/outbox/agent-cache.log" "$d/run/report.md" "$OUT/" 2>/dev/null ;;
    *) echo "unknown step $s" ;;
  esac
done
