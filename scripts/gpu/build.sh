#!/usr/bin/env bash
# Builds autooptim against the GPU machine's CUDA libtorch (the one inside its python3's torch) with the
# Debian libraries carried in .device-deps (made here by ../shared/tools/device-deps.sh). Run on the GPU
# machine from the repo root: scripts/gpu/build.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
[ -f .device-deps/env.sh ] || [ ! -f .device-deps.txz ] || tar xJf .device-deps.txz
[ -f .device-deps/env.sh ] || { echo "scripts/gpu/build.sh: .device-deps missing: run ../shared/tools/device-deps.sh here and carry it" >&2; exit 2; }
# shellcheck disable=SC1091
source .device-deps/env.sh
D=$(realpath .device-deps)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$D/usr" -DTORCH_CUDA_ARCH_LIST=9.0 \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
  -DDEPS_INCLUDE="$DEPS_INCLUDE" -DDEPS_LIB="$DEPS_LIB" >"${OUT:-/tmp}/configure.log" 2>&1 \
  || { tail -40 "${OUT:-/tmp}/configure.log"; exit 2; }
grep -E "autooptim:" "${OUT:-/tmp}/configure.log" || true
# BUILD_TARGET: one target (autooptim) when a call has no time for the tests' binaries.
cmake --build "$build" -j "$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"} 2>&1 | tail -5
