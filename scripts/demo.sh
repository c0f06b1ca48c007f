#!/usr/bin/env bash
# make demo: the main job on the embedded tiny model (no weights needed), then where the report is.
set -euo pipefail
build=${1:-build}
out=demo-out
rm -rf "$out"
echo "+ $build/autooptim run --model wan22-tiny --out $out"
"$build/autooptim" run --model wan22-tiny --out "$out"
echo
echo "open $out/report.html (self-contained: its clips are embedded), or read $out/report.md:"
cat "$out/report.md"
# How to use a tier: the deploy path the run's deploy check has already measured.
for t in "$out"/tiers/*.json; do
  [ -e "$t" ] || break
  echo
  echo "deploy a tier: $build/autooptim generate --manifest $t --prompt \"a red circle quickly moves left across a striped background\" --out clip.mp4"
  break
done
