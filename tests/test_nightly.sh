#!/usr/bin/env bash
# ctest nightly_job: scripts/nightly.sh as a cron or CI job runs it, two nights of the tiny model at a
# reduced shape: the first keeps its run and becomes the reference; the second is compared with it by
# `autooptim compare` (compare.txt/compare.json in its folder), and becomes the reference only when
# compare found no regression. A third night against a doctored reference (its baseline 100x faster)
# must fail with exit 1 and leave the reference where it was.
# Usage: test_nightly.sh AUTOOPTIM_BINARY SOURCE_DIR
set -uo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
work=$(mktemp -d /tmp/autooptim-nightly.XXXXXX)
trap 'rc=$?; [ $rc -eq 0 ] && rm -rf "$work" || echo "left for a look: $work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
reports="$work/reports"
args=(--model wan22-tiny --frames 5 --steps 2 --height 64 --width 96 --max-prompts 1 --repeats 1 --executor-trials 1 --budget-trials 2 --budget-minutes 3)
cd "$src"

AUTOOPTIM="$bin" scripts/nightly.sh "$reports" "${args[@]}" >"$work/night1.out" 2>&1 || fail "night 1 exited $?: $(tail -n 5 "$work/night1.out")"
night1=$(readlink "$reports/latest")
[ -n "$night1" ] && [ -f "$reports/$night1/report.json" ] || fail "night 1 is not the reference: $(ls -l "$reports")"
grep -q "nothing to compare with" "$work/night1.out" || fail "night 1 compared with something"
sleep 1  # the folders are named by the second

AUTOOPTIM="$bin" scripts/nightly.sh "$reports" "${args[@]}" >"$work/night2.out" 2>&1
rc2=$?
night2=$(ls -1 "$reports" | grep -v latest | sort | tail -n 1)
[ "$night2" != "$night1" ] || fail "night 2 kept no folder of its own"
[ -f "$reports/$night2/compare.txt" ] && [ -f "$reports/$night2/compare.json" ] || fail "night 2 has no comparison"
grep -q "^tier 1.5x:" "$reports/$night2/compare.txt" || fail "compare.txt lacks the tiers: $(cat "$reports/$night2/compare.txt")"
case $rc2 in
  0) [ "$(readlink "$reports/latest")" = "$night2" ] || fail "night 2 had no regression but is not the reference" ;;
  1) [ "$(readlink "$reports/latest")" = "$night1" ] || fail "night 2 regressed but became the reference" ;;
  *) fail "night 2 exited $rc2: $(tail -n 5 "$work/night2.out")" ;;
esac
sleep 1

# A reference whose baseline was 100 times faster: the next night is a regression whatever the noise.
ref=$(readlink "$reports/latest")
sed -i 's/"seconds": [0-9.e+-]*/"seconds": 0.00001/' "$reports/$ref/report.json"
AUTOOPTIM="$bin" scripts/nightly.sh "$reports" "${args[@]}" >"$work/night3.out" 2>&1
rc3=$?
[ $rc3 -eq 1 ] || fail "night 3 against a much faster reference exited $rc3, expected 1: $(tail -n 8 "$work/night3.out")"
grep -q "baseline: .*REGRESSION\|regression" "$work/night3.out" || fail "night 3 did not name the regression"
[ "$(readlink "$reports/latest")" = "$ref" ] || fail "the regressed night 3 became the reference"
echo "PASS: nightly job kept $(ls -1d "$reports"/20* | wc -l) runs; night 2 exit $rc2; night 3 (doctored reference) exit 1"
