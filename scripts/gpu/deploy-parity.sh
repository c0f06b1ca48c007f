#!/usr/bin/env bash
# Deploy parity on the GPU (docs/deploy.md): the trained wan22-tiny gated on the GPU with the fused kernel
# switches (lossless) and with EasyCache + text_trim (lossy), then each manifest and the baseline through
# `generate --manifest` in fresh processes: the clips' SHA-256 must be the gate's (clips.json), and the times
# are printed next to the gate's. Then `run` on the tiny model with its deploy check. Results in $OUT.
#   scripts/gpu/deploy-parity.sh [gate] [run]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
source .device-deps/env.sh
bin=build-gpu/autooptim
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(gate run)
work=$(mktemp -d)
prompt=$(python3 -c 'import json;print(json.loads(open("prompts/wan22-tiny/visible.jsonl").readline())["prompt"])')
python3 - manifests/wan22-tiny/baseline.json "$work" <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
def patch(name, family, lossless, flags):
    m = dict(base, id="wan22-tiny/gpu/" + name, kind="patch", family=family, base=base["id"], lossless=lossless)
    m["flags"] = dict(base["flags"], **flags)
    json.dump(m, open(sys.argv[2] + "/" + name + ".json", "w"), indent=2)
patch("fused", "kernel", True, {k: True for k in ["fused_norm_modulate", "fused_gate_residual", "fused_qk_norm_rope",
                                                  "gelu_epilogue", "fused_cross_norm", "fused_qkv", "cross_kv_cache"]})
patch("easycache-text-trim", "composite", False, {"text_trim": True, "easycache": {"enabled": True, "order": 1, "threshold": 0.15}})
PY
for s in "${steps[@]}"; do
  echo "=== $s ($(date -u +%H:%M:%S))"
  case "$s" in
    gate)
      for name in fused easycache-text-trim; do
        $bin gate --model wan22-tiny --device cuda --manifest "$work/$name.json" --split smoke --max-prompts 1 --repeats 2 \
          --out "$work/g-$name" > "$OUT/gate-$name.txt" 2> "$OUT/gate-$name.log"
        echo "gate $name rc=$?: $(grep -E 'speedup' "$OUT/gate-$name.txt")"
        want=$(python3 -c "import json,sys;c=json.load(open('$work/g-$name/clips.json'))['clips'];print(list(c.values())[0]['frames_sha256'])")
        want_base=$(python3 -c "import json,sys;c=json.load(open('$work/g-$name/clips.json'))['clips'];print(list(c.values())[0]['baseline_frames_sha256'])")
        for i in 1 2; do
          $bin generate --device cuda --model wan22-tiny --prompt "$prompt" --seed 42 --repeat 2 --quiet --json "$work/b.json" > /dev/null 2>&1
          $bin generate --device cuda --manifest "$work/$name.json" --prompt "$prompt" --seed 42 --repeat 2 --quiet --json "$work/c.json" > /dev/null 2>&1
          python3 - "$work/b.json" "$work/c.json" "$want_base" "$want" "$name" <<'PY' | tee -a "$OUT/deploy-parity.txt"
import json, sys
b, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"{sys.argv[5]}: baseline bit-exact {all(r['frames_sha256'] == sys.argv[3] for r in b['runs'])}, "
      f"candidate bit-exact {all(r['frames_sha256'] == sys.argv[4] for r in c['runs'])}, "
      f"baseline {[round(r['seconds'], 3) for r in b['runs']]} s, candidate {[round(r['seconds'], 3) for r in c['runs']]} s")
PY
        done
      done ;;
    run)
      $bin run --model wan22-tiny --device cuda --out "$work/run" --budget-minutes 5 > "$OUT/run.log" 2>&1
      echo "run rc=$?"; cp "$work/run/report.md" "$OUT/run-report.md" 2>/dev/null
      python3 -c "import json;r=json.load(open('$work/run/report.json'));print(json.dumps(r.get('deploy_checks'),indent=1))" | tee "$OUT/run-deploy.json" ;;
  esac
done
