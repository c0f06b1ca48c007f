#!/usr/bin/env bash
# Builds tests/hopper_attention_probe.cu with the sm_90a attention kernel straight through nvcc (no CMake,
# no libtorch: ~15 s) and runs it under a timeout: the kernel's variants on small and odd shapes against a
# float64 reference, diagnostic inputs, and the official shape timed. For iterating on the kernel on a
# leased Hopper GPU, from the repo root:
#   scripts/gpu/hopper-probe.sh [--variants 1,2,...] [--skip-official] [--official-only]
set -uo pipefail
cd "$(dirname "$0")/../.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
bin=${PROBE_BIN:-/tmp/hopper_attention_probe}
"$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I src src/runtime/techniques/kernel/hopper_attention.cu \
  tests/hopper_attention_probe.cu -o "$bin" || { echo "hopper-probe: the build failed"; exit 2; }
timeout "${PROBE_TIMEOUT:-300}" "$bin" "$@"
rc=$?
[ $rc -eq 124 ] && echo "hopper-probe: stopped after ${PROBE_TIMEOUT:-300} s"
exit $rc
