#!/usr/bin/env bash
# Issue 13 part 7: `run` at a reduced configuration on one H200 with synthetic weights, inside ONE
# 10-minute device call, with candidates of every family (kernel, cache, sparse, quant) gated.
#
#   scripts/gpu/run-reduced.sh            # the run (build-gpu/autooptim must exist: scripts/gpu/check.sh build)
#   scripts/gpu/run-reduced.sh build      # build first (only when build-gpu is not there yet: the build takes minutes)
#   scripts/gpu/run-reduced.sh plan       # --plan only: calibration, estimate, budget check (about a minute)
#
# Settings (environment): FRAMES=33 HEIGHT=480 WIDTH=832 STEPS=20 MINUTES=7.5 TRIALS=10 EXEC_TRIALS=2
# REPEATS=1 PROMPTS=1 SCREEN=0 (the screen's minimum estimated speedup; 0 = off, as every reduced run
# defaults to) GPUS=0 (one worker per listed GPU: "all" on a multi-GPU host, nothing else changes).
#
# One worker process loads the 5B model once (its load is in the report: workers[].load_s); the executors
# and the orchestrator hold no model. A hard stop (SIGINT at LIMIT seconds, default 570) still writes the
# report of what was done, so the call never ends without one. Results in $OUT:
#   run-reports.tgz (run/report.json|md|html, ledger.jsonl, logs: no clips), summary.txt (the figures to record), gpu.csv
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/autooptim-gpu}
mkdir -p "$OUT"
FRAMES=${FRAMES:-33} HEIGHT=${HEIGHT:-480} WIDTH=${WIDTH:-832} STEPS=${STEPS:-20}
MINUTES=${MINUTES:-7.5} TRIALS=${TRIALS:-10} EXEC_TRIALS=${EXEC_TRIALS:-2} REPEATS=${REPEATS:-1} PROMPTS=${PROMPTS:-1}
SCREEN=${SCREEN:-0} GPUS=${GPUS:-0} LIMIT=${LIMIT:-570}
[ -f .device-deps/env.sh ] && source .device-deps/env.sh
bin=build-gpu/autooptim
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,memory.total,driver_version --format=csv > "$OUT/gpu.csv" 2>&1
start=$(date +%s)
if [ "${1:-}" = build ] || [ ! -x "$bin" ]; then
  echo "=== build ($(date -u +%H:%M:%S))"
  bash scripts/gpu/build.sh build-gpu || exit 2
fi
common=(--model wan22-ti2v-5b --synthetic-weights --frames "$FRAMES" --height "$HEIGHT" --width "$WIDTH" --steps "$STEPS"
        --budget-minutes "$MINUTES" --budget-trials "$TRIALS" --executor-trials "$EXEC_TRIALS" --repeats "$REPEATS"
        --max-prompts "$PROMPTS" --screen-min-speedup "$SCREEN" --gpus "$GPUS")
if [ "${1:-}" = plan ]; then
  echo "=== plan ($(date -u +%H:%M:%S))"
  $bin run --plan "${common[@]}" 2>&1 | tee "$OUT/plan.txt" | tail -8
  exit "${PIPESTATUS[0]}"
fi
left=$(( LIMIT - ($(date +%s) - start) ))
echo "=== run ($(date -u +%H:%M:%S)), hard stop in ${left}s"
AUTOOPTIM_TTY=0 AUTOOPTIM_LOAD_LOG="$OUT/model-loads.log" timeout -s INT -k 20 "$left" \
  $bin run "${common[@]}" --baseline-cache "$OUT/baseline-cache" --out "$OUT/run" > "$OUT/run.log" 2>&1
rc=$?
tail -25 "$OUT/run.log"
echo "run rc=$rc (0 ok; 2 nothing gated; 130 stopped by the hard limit: the report covers what was done)"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys, collections
out = sys.argv[1]
try:
    r = json.load(open(out + "/run/report.json"))
except Exception as e:
    print("no report:", e); sys.exit(0)
ds, mem = r.get("device_seconds", {}), r.get("memory", {})
print(f"device {r.get('device_name')}  config {r.get('config')}  elapsed {r.get('elapsed_s', 0):.0f} s  gate runs {r.get('gate_runs')}")
print(f"device-seconds {ds.get('total_s', 0):.0f}  generating {ds.get('generating_s', 0):.0f} ({100*ds.get('generating_share', 0):.0f}%)"
      f"  gating {ds.get('gating_s', 0):.0f}  screening {ds.get('screening_s', 0):.0f}  exploration wall {ds.get('exploration_s', 0):.0f}")
print(f"peak device memory {mem.get('peak_device_bytes', 0)/1e9:.1f} GB (one worker)  worker RSS {mem.get('peak_worker_rss_kb', 0)/1e6:.1f} GB"
      f"  executors RSS {mem.get('executors_peak_rss_kb', 0)/1e6:.2f} GB  models loaded {mem.get('models_loaded')}")
for w in r.get("workers", []):
    print(f"worker {w['id']}: load {w['load_s']:.1f} s, held {w['held_s']:.0f} s, busy {w['busy_s']:.0f} s, {w['requests']} requests, {w['generations']} generations")
print("baseline:", r.get("baseline", {}).get("seconds"), "s per clip", "(cached)" if r.get("baseline", {}).get("cached") else "")
fam = collections.Counter(c["family"] for c in r.get("candidates", []) if c.get("gated"))
print("gated per family:", dict(fam))
for c in r.get("candidates", []):
    d = c.get("device_seconds", {})
    print(f"  {c['id']:<55} gated={c.get('gated')} {c.get('speedup', 0):.2f}x PSNR {c.get('psnr', 0):.1f} "
          f"passed-all-but-official={c.get('passed_all_but_official_config')} device-s {d.get('total_s', 0):.0f}"
          + ("" if c.get("gated") else f"  ({c.get('not_gated_reason', '')})"))
for e in r.get("executors", []):
    print(f"executor {e['family']}: {e['state']} ({e['reason']}), {len(e.get('explored', {}).get('trials', []))} trials")
PY
# What comes back must stay small (the device returns a few files of at most 16 MiB; the run folder with
# its clips was 587 MB on 2026-12-04 and none of it came back): the reports, ledger, executor and worker
# logs in one archive, the clips left behind.
if [ -d "$OUT/run" ]; then
  # Text files only, each under 4 MB: excluding the clip formats by name still left 366 MB on 2026-12-04
  # (evening), so what goes in is listed instead.
  (cd "$OUT" && find run -type f -size -4M \( -name '*.json' -o -name '*.jsonl' -o -name '*.log' -o -name '*.md' \
     -o -name '*.html' -o -name '*.txt' -o -name '*.xml' \) -print0 | tar czf run-reports.tgz --null -T -)
  (cd "$OUT" && find run -type f -size +4M -printf '%s %p\n' | sort -rn | head -5 > run-large-files.txt)
  rm -rf "$OUT/run" "$OUT/baseline-cache"
  ls -la "$OUT/run-reports.tgz"
fi
