#!/usr/bin/env bash
# Function length: no function in src/ or apps/ longer than 100 lines, the lambdas inside it included, so
# that each one reads on a screen or two. A function runs from the first line of its signature (at column 0)
# to its closing brace at column 0, in code as clang-format makes it (format_check.sh); member functions
# defined inside a class body are not counted. The few that stay longer are listed, each with its reason,
# in function_length_allowed.txt; the check fails on any other, and on a listed one that is gone or now
# short enough (so the list only shrinks).
# Usage: function_length.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: function_length.sh SOURCE_DIR}
limit=100
cd "$root"
allowed=tests/architecture/function_length_allowed.txt
mapfile -t files < <(git ls-files 'src/*' 'apps/*' 2>/dev/null | grep -E '\.(h|cpp|cu|cuh)$' ||
                     find src apps -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' | sort)

# The allow list first ("path:signature-prefix  # reason"), then every source file. A signature is its
# lines up to the opening brace, joined by single spaces; an entry allows the functions of its path whose
# signature starts with its prefix.
awk -v limit="$limit" -v allowed="$allowed" -v n_files="${#files[@]}" '
FILENAME == allowed {
  if ($0 ~ /^[[:space:]]*(#|$)/) next
  hash = index($0, "#")
  if (hash == 0) {
    printf "function length: %s:%d: no reason (\"path:signature-prefix  # reason\")\n", allowed, FNR > "/dev/stderr"
    bad = 1
    next
  }
  entry = substr($0, 1, hash - 1)
  sub(/[[:space:]]+$/, "", entry)
  allow[++n_allow] = entry
  next
}
FNR == 1 { open = 0; pending = 0 }
!open && /^(namespace|struct|class|enum|union|extern|using|typedef|#)/ { pending = 0 }
!open && /^[A-Za-z_]/ && !/^(namespace|struct|class|enum|union|extern|using|typedef|#)/ && !/;$/ {
  pending = FNR
  sig = $0
}
!open && pending && FNR > pending {
  line = $0
  sub(/^[[:space:]]+/, "", line)
  sig = sig " " line
}
!open && pending && /\{$/ {
  open = 1
  start = pending
  pending = 0
  sub(/[[:space:]]*\{$/, "", sig)
  next
}
!open && /;$/ { pending = 0 }
open && /^}/ {
  open = 0
  lines = FNR - start + 1
  if (lines <= limit) next
  key = FILENAME ":" sig
  for (i = 1; i <= n_allow; ++i)
    if (index(key, allow[i]) == 1) {
      used[i] = 1
      next
    }
  printf "%s:%d: %d lines: %s\n", FILENAME, start, lines, sig > "/dev/stderr"
  long++
}
END {
  if (long > 0) {
    printf "function length: %d function(s) over %d lines: split them (or list one, with its reason, in %s)\n",
           long, limit, allowed > "/dev/stderr"
    bad = 1
  }
  for (i = 1; i <= n_allow; ++i)
    if (!used[i]) {
      printf "function length: %s is listed in %s but is not over %d lines: remove it from the list\n",
             allow[i], allowed, limit > "/dev/stderr"
      bad = 1
    }
  if (!bad)
    printf "function length: no function over %d lines in %d files (%d listed, each with its reason, in %s)\n",
           limit, n_files, n_allow, allowed
  exit bad
}
' "$allowed" "${files[@]}"
