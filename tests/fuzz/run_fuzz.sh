#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time:
#   run_fuzz.sh TARGET SECONDS SOURCE_DIR BUILD_DIR RUNTIME_LIBS [CMAKE_PREFIX_PATH]
# RUNTIME_LIBS: libautooptim_runtime.a and the static libraries it links, separated by ':'.
# Exit 77 (ctest: skipped) when clang++ or libFuzzer is missing; otherwise the fuzzer's own status
# (non-zero on a crash, a leak, undefined behaviour, a timeout or an uncaught exception; the input is
# kept under BUILD_DIR/fuzz/artifacts/).
set -euo pipefail
target=$1 seconds=$2 src=$3 build=$4 runtime_lib=${5:-} prefix_path=${6:-}
runtime_lib=${runtime_lib//:/;}  # the runtime and the libraries it links, ':'-separated: a CMake list
fuzz_build=$build/fuzz
clangxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clangxx" ]; then
  echo "skipped: clang++ not found (apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
mkdir -p "$fuzz_build"
probe=$fuzz_build/probe
if [ ! -x "$probe" ]; then
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$fuzz_build/probe.cpp"
  if ! "$clangxx" -fsanitize=fuzzer "$fuzz_build/probe.cpp" -o "$probe" 2>"$fuzz_build/probe.log"; then
    echo "skipped: $clangxx cannot link libFuzzer (apt-get install libclang-rt-14-dev)"
    exit 77
  fi
fi
# One configure and build for all targets; a lock keeps parallel ctest jobs from building twice.
(
  flock 9
  # Configured every time (quick once the cache exists): the main build's library list changes with it.
  cmake -S "$src/tests/fuzz" -B "$fuzz_build" -G Ninja -DCMAKE_CXX_COMPILER="$clangxx" \
    -DAUTOOPTIM_RUNTIME_LIB="$runtime_lib" -DCMAKE_PREFIX_PATH="$prefix_path" >"$fuzz_build/configure.log" 2>&1 ||
    { cat "$fuzz_build/configure.log"; exit 1; }
  cmake --build "$fuzz_build" --target "$target" >"$fuzz_build/build-$target.log" 2>&1 ||
    { tail -50 "$fuzz_build/build-$target.log"; exit 1; }
) 9>"$fuzz_build/.lock"
corpus=$src/tests/fuzz/corpus/${target#fuzz_}
new_units=$fuzz_build/new-$target
mkdir -p "$new_units" "$fuzz_build/artifacts"
# New inputs go to $new_units (first folder), never into the source tree's corpus.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
# -error_exitcode: libFuzzer's default for a crash is 77, which ctest would report as "skipped".
exec "$fuzz_build/$target" -max_total_time="$seconds" -error_exitcode=1 -timeout_exitcode=1 -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
  -artifact_prefix="$fuzz_build/artifacts/$target-" -print_final_stats=1 "$new_units" "$corpus"
