#!/bin/sh
# A scripted honest agent standing in for a model (docs/agents.md): it reads its brief, asks for the registry
# and its budget, measures one EasyCache setting on a visible prompt (twice when the first was slower and the
# budget allows), proposes it when it was faster, and calibrates MagCache.
# Usage (as an --agent command): sh honest_agent.sh {brief}
set -eu
brief=${1:?usage: honest_agent.sh BRIEF}
grep -q "cache" "$brief"
autooptim agent techniques >techniques.out
grep -q '"easycache"' techniques.out
autooptim agent budget >budget.out
cat budget.out
trials_left=$(sed -n 's/^ *"trials_left": \([0-9]*\),*$/\1/p' budget.out | head -n 1)
cat >easycache.json <<'JSON'
{"flags": {"easycache": {"enabled": true, "order": 1, "threshold": 0.15, "warmup_steps": 5}}}
JSON
field() { sed -n "s/^ *\"$1\": \([0-9.e+-]*\),*\$/\1/p" trial.out | head -n 1; }
measure() {
  autooptim agent trial --manifest easycache.json --prompts 1 >trial.out
  cat trial.out
  speedup=$(field speedup) psnr=$(field psnr_min) skipped=$(field skip_ratio)
  echo "measured ${speedup}x at ${psnr} dB, forward-skip ratio ${skipped:-none}"
}
faster() { awk -v s="$speedup" 'BEGIN { exit !(s > 1.0) }'; }
# One timed pair on a loaded machine is noise: a slower first measurement is measured once more, as an
# engineer would, before the setting is given up, when the budget keeps one trial for the calibration below.
measure
if ! faster && [ "${trials_left:-0}" -ge 3 ]; then measure; fi
if faster; then
  autooptim agent propose --manifest easycache.json --why "EasyCache order 1 at 0.15: ${speedup}x, ${psnr} dB on 1 visible prompt"
fi
# A calibration (charged as a trial): MagCache's ratio schedule, measured on a visible prompt.
autooptim agent calibrate --technique magcache >calibration.out
grep -q '"ratios"' calibration.out
autooptim agent log "honest agent: done"
