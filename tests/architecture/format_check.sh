#!/usr/bin/env bash
# The code's format: every tracked C++ and CUDA file under src/, apps/ and tests/ must be what
# clang-format makes of it with the repository's .clang-format (Google's style at 120 columns).
# `make format` rewrites them. Usage: format_check.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: format_check.sh SOURCE_DIR}
cd "$root"
if ! command -v clang-format >/dev/null; then
  echo "format: clang-format is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files 'src/*' 'apps/*' 'tests/*' | grep -E '\.(h|cpp|cu|cuh)$')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: ${#bad[@]} file(s) differ from .clang-format (run 'make format'):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
long=$(awk 'length > 120 { print FILENAME ":" FNR }' "${files[@]}" | head -5)
if [ -n "$long" ]; then
  echo "format: lines over 120 columns clang-format could not break (comments, strings):" >&2
  echo "$long" >&2
  exit 1
fi
echo "format: ${#files[@]} files match .clang-format, none over 120 columns"
