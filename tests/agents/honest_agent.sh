#!/bin/sh
# A scripted honest agent standing in for a model (docs/agents.md): it reads its brief, asks for the registry
# and its budget, measures one EasyCache setting on a visible prompt, proposes it when it was faster or skipped a
# fifth of the forwards, and calibrates MagCache.
# Usage (as an --agent command): sh honest_agent.sh {brief}
set -eu
brief=${1:?usage: honest_agent.sh BRIEF}
grep -q "cache" "$brief"
autooptim agent techniques >techniques.out
grep -q '"easycache"' techniques.out
autooptim agent budget
cat >easycache.json <<'JSON'
{"flags": {"easycache": {"enabled": true, "order": 1, "threshold": 0.15, "warmup_steps": 5}}}
JSON
autooptim agent trial --manifest easycache.json --prompts 1 >trial.out
cat trial.out
field() { sed -n "s/^ *\"$1\": \([0-9.e+-]*\),*\$/\1/p" trial.out | head -n 1; }
speedup=$(field speedup) psnr=$(field psnr_min) skipped=$(field skip_ratio)
echo "measured ${speedup}x at ${psnr} dB, forward-skip ratio ${skipped:-none}"
# One timed pair on a loaded machine is noise; the share of forwards the cache skipped is not. Proposed when it
# measured faster or skipped a fifth of the forwards or more: the gate times it properly.
if awk -v s="$speedup" -v k="${skipped:-0}" 'BEGIN { exit !(s > 1.0 || k >= 0.2) }'; then
  autooptim agent propose --manifest easycache.json \
    --why "EasyCache order 1 at 0.15: ${speedup}x, ${psnr} dB, ${skipped:-no} forward-skip ratio on 1 visible prompt"
fi
# A calibration (charged as a trial): MagCache's ratio schedule, measured on a visible prompt.
autooptim agent calibrate --technique magcache >calibration.out
grep -q '"ratios"' calibration.out
autooptim agent log "honest agent: done"
