#!/usr/bin/env bash
# vae_cuda_graph on the GPU, in one device call: build autooptim and the test binary, the VAE's GPU tests
# (the graph decode against the eager one bit for bit, with the other switches), then the decode at
# TI2V-5B's shape (31 latent frames to 121x704x1280, synthetic weights) in one process: kernel-vae, kernel-vae
# + vae_cuda_graph, each twice in alternating order (drift shows as a difference between a set's two
# rows), and + vae_causal_ring 4, each against one float32 decode of the same latents.
#   scripts/gpu/vae-graph.sh [build]     (env: REPEAT, 3 by default; SETS, the rows to time)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
source .device-deps/env.sh
if [ "${1:-}" = build ]; then
  BUILD_TARGET=autooptim bash scripts/gpu/build.sh build-gpu > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 2; }
  cmake --build build-gpu -j "$(nproc)" --target runtime_tests >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 2; }
  echo "built ($SECONDS s)"
fi
timeout 240 build-gpu/tests/runtime_tests --gtest_filter='GpuKernels.Vae*:GpuKernels.GoldenVaeDecodeWithEverySwitch' > "$OUT/vae-tests.log" 2>&1
echo "--- VAE GPU tests (rc=$?, $SECONDS s)"
grep -E "^\[  (PASSED|FAILED|  OK) |Failure|Expected|Which is|differ|error" "$OUT/vae-tests.log" | head -40
d=$(mktemp -d)
vm=()
for v in ${SETS:-plain-a graph-a plain-b graph-b graph-ring4}; do
  python3 - manifests/wan22-ti2v-5b/kernel-vae.json "$d/$v.json" "$v" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
v = sys.argv[3]
m["id"] = "wan22-ti2v-5b/kernel-vae-" + v
if v.startswith("graph"):
    m["flags"]["vae_cuda_graph"] = True
if v.endswith("ring4"):
    m["flags"]["vae_causal_ring"] = 4
json.dump(m, open(sys.argv[2], "w"))
PY
  vm+=(--vae-manifest "$d/$v.json")
done
build-gpu/autooptim bench --model wan22-ti2v-5b --synthetic-weights --vae-only --repeat "${REPEAT:-3}" "${vm[@]}" \
  --json "$OUT/bench-vae-graph.json" > /dev/null 2> "$OUT/bench-vae-graph.log"
echo "--- bench --vae-only (rc=$?, $SECONDS s)"
grep -E "vae_decode|error|Error" "$OUT/bench-vae-graph.log"
python3 - "$OUT/bench-vae-graph.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for k, v in j.get("vae_decode_switches", {}).items():
    t = v.get("trace", {})
    print(f"{k}: median {v['median_s']:.3f} s, min {v['min_s']:.3f}, runs {[round(x, 3) for x in v['runs_s']]}, host {v['host_enqueue_s']:.3f} s, "
          f"peak {v['peak_memory_gb']:.1f} GB, {v['psnr_vs_fp32_db']:.2f} dB, "
          f"captures {t.get('kernel.vae_cuda_graph.captures', 0)}, replays {t.get('kernel.vae_cuda_graph.replays', 0)}")
PY
