#!/bin/sh
# A scripted honest agent standing in for a model (docs/agents.md): it reads its brief, asks for the registry
# and its budget, measures one EasyCache setting on a visible prompt, proposes it when it was faster, and
# calibrates MagCache.
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
speedup=$(sed -n 's/^ *"speedup": \([0-9.e+-]*\),*$/\1/p' trial.out | head -n 1)
psnr=$(sed -n 's/^ *"psnr_min": \([0-9.e+-]*\),*$/\1/p' trial.out | head -n 1)
echo "measured ${speedup}x at ${psnr} dB"
if awk -v s="$speedup" 'BEGIN { exit !(s > 1.0) }'; then
  autooptim agent propose --manifest easycache.json --why "EasyCache order 1 at 0.15: ${speedup}x, ${psnr} dB on 1 visible prompt"
fi
# A calibration (charged as a trial): MagCache's ratio schedule, measured on a visible prompt.
autooptim agent calibrate --technique magcache >calibration.out
grep -q '"ratios"' calibration.out
autooptim agent log "honest agent: done"
