#!/usr/bin/env bash
# make demo: the main job on the embedded tiny model (no weights needed), then where the report is.
set -euo pipefail
build=${1:-build}
out=demo-out
rm -rf "$out"
echo "+ $build/autooptim run --model wan22-tiny --out $out"
"$build/autooptim" run --model wan22-tiny --out "$out"
echo
echo "open $out/report.html (self-contained), or read $out/report.md:"
cat "$out/report.md"
