#!/usr/bin/env bash
# One nightly sweep: run autooptim, keep the run's folder under REPORTS/<UTC date-time>, and compare its
# report with the previous night's (REPORTS/latest). Exit: compare's status (0 no regression, 1 a
# regression beyond the recorded noise, 2 bad input), or the run's own status when it could not finish.
#
#   scripts/nightly.sh REPORTS [autooptim run options...]
#   e.g. scripts/nightly.sh /srv/autooptim-nightly --model wan22-ti2v-5b --weights /models/Wan2.2-TI2V-5B-Diffusers
#
# AUTOOPTIM: the binary (default: autooptim on PATH). KEEP: how many runs to keep (default 30; the
# folders hold clips). The first night has nothing to compare with and exits 0.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: nightly.sh REPORTS [autooptim run options...]" >&2; exit 2; }
reports=$1; shift
bin=${AUTOOPTIM:-autooptim}
keep=${KEEP:-30}
mkdir -p "$reports" || exit 2
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="$reports/$stamp"

"$bin" run "$@" --out "$out"
run_rc=$?
if [ ! -f "$out/report.json" ]; then
  echo "nightly: the run wrote no report (exit $run_rc)" >&2
  exit $((run_rc == 0 ? 2 : run_rc))
fi

rc=0
if [ -f "$reports/latest/report.json" ]; then
  prev=$(readlink -f "$reports/latest")
  "$bin" compare "$prev/report.json" "$out/report.json" --json "$out/compare.json" | tee "$out/compare.txt"
  rc=${PIPESTATUS[0]}
else
  echo "nightly: first run in $reports, nothing to compare with"
fi
# The new run becomes the reference only when it is not a regression: a regression is compared
# against the last good night again tomorrow, until it is fixed.
[ "$rc" -eq 0 ] && ln -sfn "$stamp" "$reports/latest"

# Keep the last KEEP runs (never the one latest points at).
latest=$(readlink "$reports/latest" 2>/dev/null || true)
ls -1d "$reports"/20*Z 2>/dev/null | sort | head -n -"$keep" | while read -r old; do
  [ "$(basename "$old")" = "$latest" ] || rm -rf "$old"
done
exit "$rc"
