#!/usr/bin/env bash
# EasyCache's quality curve on wan22-tiny (issue 12 part 5): for each threshold, a gate run of the
# manifest against the baseline on the first prompts of a split, and one row: threshold, forwards
# skipped, worst PSNR and SSIM, speedup and the gate's verdict. Uses the default weights (the shipped
# trained ones; WEIGHTS_ARGS=--synthetic-weights for the random model).
#   scripts/easycache-curve.sh [BUILD_DIR] [OUT_DIR]     env: THRESHOLDS, SPLIT (val), PROMPTS (3), REPEATS (2),
#   ORDER (0: reuse the residual; 1: first-order forecast, EasyCacheOptions::order), WARMUP (10 steps)
#   POLICY=taylorseer: the same curve for TaylorSeer, THRESHOLDS are then its intervals (default "2 3 4 6"),
#   ORDER its forecast order (0-2) and WARMUP its warm-up steps.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-easycache-curve}
policy=${POLICY:-easycache}
case "$policy" in
  easycache) thresholds=${THRESHOLDS:-"0.01 0.02 0.05 0.08 0.1 0.15 0.2 0.3"} ;;
  taylorseer) thresholds=${THRESHOLDS:-"2 3 4 6"} ;;
  *) echo "easycache-curve: POLICY must be easycache or taylorseer" >&2; exit 2 ;;
esac
split=${SPLIT:-val}
prompts=${PROMPTS:-3}
repeats=${REPEATS:-2}
mkdir -p "$out"
rows="$out/curve.jsonl"
: > "$rows"
for t in $thresholds; do
  python3 - "$t" "$out/manifest-$t.json" "${ORDER:-0}" "${WARMUP:-10}" "$policy" <<'EOF'
import json, sys
t, path, order, warmup, policy = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
m = json.load(open("manifests/wan22-tiny/baseline.json"))
if policy == "taylorseer":
    m.update({"id": f"wan22-tiny/cache/taylorseer-o{order}-n{t:g}-w{warmup}", "kind": "patch", "family": "cache",
              "base": "wan22-tiny/baseline", "lossless": False,
              "description": f"TaylorSeer, interval {t:g}, order {order} (scripts/easycache-curve.sh)"})
    m["flags"] = {"cpu_threads": 0, "taylorseer": {"enabled": True, "interval": int(t), "order": order,
                                                    "warmup_steps": warmup, "dense_last_step": True}}
    json.dump(m, open(path, "w"), indent=1)
    sys.exit(0)
m.update({"id": f"wan22-tiny/cache/easycache-t{t:g}", "kind": "patch", "family": "cache", "base": "wan22-tiny/baseline",
          "lossless": False, "description": f"EasyCache at threshold {t:g} (scripts/easycache-curve.sh)"})
m["flags"] = {"cpu_threads": 0, "easycache": {"enabled": True, "threshold": t, "warmup_steps": warmup, "dense_last_step": True}}
if warmup != 10:
    m["id"] += f"-w{warmup}"
if order:
    m["id"] = m["id"].replace("easycache-", f"easycache-o{order}-")
    m["flags"]["easycache"]["order"] = order
json.dump(m, open(path, "w"), indent=1)
EOF
  set +e
  # shellcheck disable=SC2086
  "$build/autooptim" gate --model wan22-tiny ${WEIGHTS_ARGS:-} --manifest "$out/manifest-$t.json" --split "$split" \
    --max-prompts "$prompts" --repeats "$repeats" --out "$out/gate-$t" --cache-dir "$out/baseline-cache" --json \
    > "$out/verdict-$t.json" 2> "$out/gate-$t.log"
  rc=$?
  set -e
  [ "$rc" -le 1 ] || { echo "easycache-curve: gate at threshold $t failed (exit $rc): see $out/gate-$t.log" >&2; tail -3 "$out/gate-$t.log" >&2; exit "$rc"; }
  python3 - "$t" "$out/verdict-$t.json" >> "$rows" <<'EOF'
import json, sys
t, v = float(sys.argv[1]), json.load(open(sys.argv[2]))
work = v["gates"]["authenticity"]["details"].get("trace", {})
failed = [k for k, g in v["gates"].items() if not g["pass"]]
print(json.dumps({"threshold": t, "skip_ratio": work.get("cache.skip_ratio"), "psnr": v["psnr"], "ssim": v["ssim"],
                  "speedup": v["speedup"], "accepted": v["accepted"], "failed": failed}))
EOF
  tail -1 "$rows"
done
python3 - "$rows" "$policy" > "$out/curve.md" <<'EOF'
import json, sys
print("| " + ("interval" if sys.argv[2] == "taylorseer" else "threshold") + " | forwards skipped | worst PSNR (dB) | worst SSIM | speedup | gate |")
print("|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    verdict = "accepted" if r["accepted"] else "rejected: " + ", ".join(r["failed"])
    skip = "-" if r["skip_ratio"] is None else f'{100 * r["skip_ratio"]:.0f}%'
    print(f'| {r["threshold"]:g} | {skip} | {r["psnr"]:.2f} | {r["ssim"]:.4f} | {r["speedup"]:.2f}x | {verdict} |')
EOF
cat "$out/curve.md"
