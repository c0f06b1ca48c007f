#!/usr/bin/env bash
# make demo: runs the main job on the embedded tiny model when the binary has it; until then it checks
# the runtime against the golden vectors so a newcomer sees numbers, not nothing.
set -euo pipefail
build=${1:-build}
bin="$build/autooptim"
if "$bin" --help 2>/dev/null | grep -qE '^\s+run\b'; then
  echo "+ $bin run --model wan22-tiny --out demo-out"
  exec "$bin" run --model wan22-tiny --out demo-out
elif "$bin" --help 2>/dev/null | grep -qE '^\s+generate\b'; then
  echo "+ $bin generate --model wan22-tiny --prompt 'a red fox running through snow' --out demo-out/clip.mp4"
  mkdir -p demo-out
  exec "$bin" generate --model wan22-tiny --prompt "a red fox running through snow" --out demo-out/clip.mp4
else
  echo "+ $bin verify --golden tests/data/golden"
  exec "$bin" verify --golden tests/data/golden
fi
