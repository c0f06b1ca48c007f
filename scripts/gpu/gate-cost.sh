#!/usr/bin/env bash
# Issue 37's measurements on the device (docs/gate-cost.md): `run --plan` at the official configuration, then
# one whole gate run of the kernel tier (kernel-hopper + kernel-vae composed) at the official shape with fewer
# denoising steps, so that it fits one device call, with the plan of the same configuration beside it: each of
# the gate's windows (integrity.timed_clocks.windows) against the generation the plan priced.
#   scripts/gpu/gate-cost.sh [STEPS] [PROMPTS]   (default: 10 steps, the val split's first 2 prompts)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
source .device-deps/env.sh
bin=build-gpu/autooptim
steps=${1:-10}
np=${2:-2}
echo "=== plan, official configuration ($(date -u +%H:%M:%S))"
$bin run --model wan22-ti2v-5b --synthetic-weights --plan --out "$OUT/plan-official" 2>&1 | grep -v '^      ' | tail -8
echo "=== plan, $steps steps, $np prompts ($(date -u +%H:%M:%S))"
$bin run --model wan22-ti2v-5b --synthetic-weights --plan --steps "$steps" --max-prompts "$np" \
  --out "$OUT/plan-reduced" > "$OUT/plan-reduced.txt" 2>&1
tail -4 "$OUT/plan-reduced.txt"
src_manifest=${MANIFEST:-manifests/wan22-ti2v-5b/kernel-hopper-vae.json}
m=$(mktemp -d)/candidate.json
python3 - "$src_manifest" "$m" "$steps" "${DROP_FLAGS:-}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["config"]["steps"] = int(sys.argv[3])
for f in sys.argv[4].split():  # DROP_FLAGS: flags left off (e.g. one whose engagement is in question)
    m["flags"].pop(f, None)
json.dump(m, open(sys.argv[2], "w"), indent=2)
PY
echo "=== gate of kernel-hopper-vae, $steps steps, $np prompts ($(date -u +%H:%M:%S))"
t0=$(date +%s.%N)
$bin gate --model wan22-ti2v-5b --synthetic-weights --manifest "$m" --steps "$steps" --split val --max-prompts "$np" \
  --out /tmp/gate-cost --json > "$OUT/gate-verdict.json" 2> "$OUT/gate.log"
rc=$?
echo "rc=$rc wall=$(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
cp /tmp/gate-cost/*.json "$OUT/" 2>/dev/null
python3 - "$OUT/gate-verdict.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
w = v["integrity"]["timed_clocks"]["windows"]
print("speedup", v.get("speedup"), "accepted", v.get("accepted"), "windows", len(w), "sum", round(sum(x["wall_s"] for x in w), 1))
for x in w:
    print(f'  {x["role"]:18s} {x["wall_s"]:8.2f} s')
print("pairs", json.dumps(v["integrity"]["timing_choices"]["pairs"]))
PY
