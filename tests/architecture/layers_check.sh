#!/usr/bin/env bash
# The layers of docs/ARCHITECTURE.md, checked: a file may include a project header of its own layer or
# of a layer below it, never one above (a back edge), and the sibling top layers (executors,
# orchestrator, train) never include each other. Edges that still break the rule are listed, each with
# its reason, in layers_allowed.txt; the check fails on any other back edge, and on a listed edge that
# is gone (so the list only shrinks).
# Usage: layers_check.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: layers_check.sh SOURCE_DIR}
allowed="$root/tests/architecture/layers_allowed.txt"

# layer_of PATH (relative to src/ or apps/): "rank name". Most specific pattern first.
layer_of() {
  case "$1" in
    base/*) echo "0 base" ;;
    models/*) echo "1 models" ;;  # the torch-free table of model facts
    runtime/techniques/*) echo "4 techniques" ;;
    runtime/safetensors.*|runtime/checkpoint.*|runtime/config_json.h|runtime/video_io.*|runtime/tokenizer*|\
    runtime/device.*|runtime/build_info.*|runtime/blas_threads.*|runtime/torch_compat.h|runtime/profile.*)
      echo "2 io" ;;
    runtime/nn.*|runtime/umt5.*|runtime/wan_transformer.*|runtime/wan_vae.*|runtime/unipc_scheduler.*|\
    runtime/forward_context.h|runtime/flops.h|runtime/trace.h|runtime/options.h|runtime/pch.h|runtime/verify.h|runtime/verify.cpp|\
    runtime/technique_options.h|\
    runtime/extension_points.*)
      echo "3 model" ;;
    runtime/*) echo "5 pipeline" ;;
    redteam/redteam_options.h) echo "6 contract" ;;  # the switches a manifest carries: plain data, no torch
    redteam/*) echo "7 redteam" ;;
    gates/manifest.*|gates/prompts.*|gates/ledger.*|gates/agent_names.*) echo "6 contract" ;;
    gates/*) echo "8 gates" ;;
    workers/*) echo "9 workers" ;;
    executors/*) echo "10 executors" ;;
    orchestrator/*) echo "10 orchestrator" ;;
    train/*) echo "10 train" ;;
    autooptim/*) echo "11 apps" ;;
    *) echo "? unknown" ;;
  esac
}

edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
cd "$root"
while IFS= read -r file; do
  rel=${file#src/}
  rel=${rel#apps/}
  read -r from_rank from_name <<<"$(layer_of "$rel")"
  if [ "$from_rank" = "?" ]; then
    echo "layers: $file is in no layer (add it to tests/architecture/layers_check.sh)" >&2
    exit 1
  fi
  { grep -oE '^#include "[^"]+"' "$file" || true; } | sed 's/^#include "//; s/"$//' | while IFS= read -r inc; do
    [ -e "src/$inc" ] || continue
    read -r to_rank to_name <<<"$(layer_of "$inc")"
    if [ "$to_rank" -gt "$from_rank" ] || { [ "$to_rank" = "$from_rank" ] && [ "$to_name" != "$from_name" ]; }; then
      echo "$file -> $inc ($from_name includes $to_name)"
    fi
  done
done < <(git ls-files 'src/*.h' 'src/*.cpp' 'src/*.cuh' 'src/*.cu' 'apps/*.h' 'apps/*.cpp' 2>/dev/null ||
         find src apps -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh') | sort -u >"$edges"

status=0
listed=$(grep -vE '^\s*(#|$)' "$allowed" | sed 's/ *#.*$//' | sort -u || true)
while IFS= read -r e; do
  [ -n "$e" ] || continue
  key=${e%% (*}
  if ! grep -qxF "$key" <<<"$listed"; then
    echo "layers: back edge $e" >&2
    status=1
  fi
done <"$edges"
while IFS= read -r key; do
  [ -n "$key" ] || continue
  if ! grep -q "^$key (" "$edges"; then
    echo "layers: $key is listed in layers_allowed.txt but no longer exists: remove it from the list" >&2
    status=1
  fi
done <<<"$listed"
n=$(wc -l <"$edges")
[ $status -eq 0 ] && echo "layers: no new back edges ($n listed, each with its reason, in layers_allowed.txt)"
exit $status
