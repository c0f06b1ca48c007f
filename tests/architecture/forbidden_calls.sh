#!/usr/bin/env bash
# Calls the product must not make, each with its reason; the check fails on any use outside the one file allowed.
#   std::filesystem::remove_all: the GPU machine's CUDA libtorch (the pip wheel) exports its own copy, which our
#   binaries bind to and which jumps to address 0; base/remove_tree.h removes a tree without it. (It crashed
#   GateGpu on 2026-12-03 and, in the agent executor's last clean-up, every agent run on the GPU on 2026-12-07.)
# Usage: forbidden_calls.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: forbidden_calls.sh SOURCE_DIR}"
hits=$(grep -rnE '\bremove_all\s*\(' src apps --include='*.cpp' --include='*.h' --include='*.cu' --include='*.cuh' |
  grep -v '^src/base/remove_tree\.' || true)
if [ -n "$hits" ]; then
  echo "forbidden calls (std::filesystem::remove_all: use runtime::remove_tree, base/remove_tree.h):" >&2
  echo "$hits" >&2
  exit 1
fi
echo "forbidden calls: none in src/ and apps/"
