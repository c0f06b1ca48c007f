#!/usr/bin/env bash
# Technique plugins judged by the gate (issue 42, items 2 and 3), end to end with the real compiler, the real
# sandbox and the trained embedded model. Every plugin runs in a sandboxed generation worker started by the gate,
# beside a worker of the pinned baseline; the gate itself never loads one: every gate below runs with
# AUTOOPTIM_PLUGIN_TRIPWIRE set, and step_reuse aborts any process outside a generation worker that loads it.
#  - step_reuse (an honest step cache a scripted agent would write): accepted, its counters engaged, the verdict
#    naming how its worker was isolated;
#  - busy_thread (step_reuse's cache, so fast and good enough, plus a thread busy for the worker's life: the
#    slowed baseline, work outside the timed window): rejected by authenticity for untimed work in its worker;
#  - memoise (outputs remembered across requests): rejected by performance, the timed requests being drawn
#    inside the window;
#  - peek_baseline (the baseline's cache read from disk, at the paths a cheat that knows the layout tries):
#    nothing of the gate's visible to it (its worker's log), and rejected by performance;
#  - claim_work (counters inflated in the worker's process: a cache that skips its own declared warm-up and
#    fifteen forwards in sixteen, and counts every block as run, so the work floors pass on paper): rejected by
#    authenticity when its speedup passes the bound of its claimed blocks by more than the noise slack, and by
#    quality in any case (15 in 16 skipped);
#  - half_frames (a "lossless kernel" that runs the transformer on every other latent frame, honest counters: a
#    lower resolution inside a technique): rejected by quality;
#  - clock_tamper (a no-op "lossless kernel" whose worker tries to set the wall clock, its frequency and the
#    monotonic clock, each to its own value): every attempt refused in the sandbox (its log), and rejected by
#    performance, the gate's clock seeing no speedup (sandbox only: outside one, root could set the clocks);
#  - crash (kills its worker on its third linear layer): rejected, the verdict saying the worker ended;
#  - hang (never returns from its third linear layer): rejected once --plugin-run-timeout passes, in bounded time
#    (without the option, as in the other gates here, the timeout is ten times the baseline's clip, >= 60 s);
#  - a manifest pinning a plugin the gate was not given: refused (exit 2), naming --plugin.
# Without user namespaces the workers run as plain processes (--plugin-without-sandbox) and the peek check is
# skipped (without a sandbox the files are visible: that is what the sandbox is for).
# Usage: test_plugin_gate.sh AUTOOPTIM SOURCE_DIR
set -euo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
# Not under /tmp: the sandbox has a /tmp of its own, where a path like the gate's would be missing anyway.
tmp=$(mktemp -d "$PWD/plugin-gate-XXXXXX")
chmod 755 "$tmp"
trap '[ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

sandbox=1
extra=()
if ! bwrap --unshare-all --die-with-parent --ro-bind / / true 2>/dev/null; then
  echo "no sandbox here: the plugins' workers run as plain processes"
  sandbox=0
  extra=(--plugin-without-sandbox)
fi

build() {  # build NAME [SOURCE]: tests/agents/plugins/NAME.cpp (or SOURCE) -> $tmp/NAME.so, prints its sha256
  "$bin" agent build "${2:-$src/tests/agents/plugins/$1.cpp}" --out "$tmp/$1.so" >"$tmp/build-$1.log" 2>&1 ||
    fail "agent build $1: $(tail -20 "$tmp/build-$1.log")"
  sha256sum "$tmp/$1.so" | cut -d' ' -f1
}
# The peek plugin looks where the gates below keep their baseline cache and their folders.
{ echo "#define PEEK_PATHS \"$tmp/cache $tmp/out $src/prompts\""; cat "$src/tests/agents/plugins/peek_baseline.cpp"; } \
  >"$tmp/peek_baseline.cpp"
declare -A sha
for p in step_reuse busy_thread memoise claim_work half_frames clock_tamper crash hang; do sha[$p]=$(build $p); done
sha[peek_baseline]=$(build peek_baseline "$tmp/peek_baseline.cpp")

manifest() {  # manifest NAME FAMILY LOSSLESS FLAGS_JSON: $tmp/NAME.json pinning $tmp/NAME.so
  python3 - "$src/manifests/wan22-tiny/baseline.json" "$tmp/$1.json" "$1" "$2" "$3" "$4" "${sha[$1]}" <<'PY'
import json, sys
base, out, name, family, lossless, flags, sha = sys.argv[1:]
m = json.load(open(base))
m.update({"id": "wan22-tiny/%s/%s" % (family, name), "kind": "patch", "family": family, "base": m["id"],
          "lossless": lossless == "true", "plugin": sha})
m["flags"].update(json.loads(flags))
json.dump(m, open(out, "w"), indent=2)
PY
}
manifest step_reuse cache false '{"step_reuse": {"enabled": true, "interval": 5}}'
manifest busy_thread cache false '{"busy_reuse": {"enabled": true}}'
manifest memoise kernel true '{"memo_ffn": true}'
manifest peek_baseline kernel true '{"peek_baseline": true}'
manifest claim_work cache false '{"claim_work": {"enabled": true}}'
manifest half_frames kernel true '{"half_frames": {"enabled": true}}'
manifest clock_tamper kernel true '{"clock_tamper": {"enabled": true}}'
manifest crash kernel true '{"crash_linear": true}'
manifest hang kernel true '{"hang_linear": true}'

gate() {  # gate NAME [OPTION...]: the verdict in $tmp/NAME-verdict.json, the exit status in $rc
  local name=$1
  shift
  set +e
  AUTOOPTIM_PLUGIN_TRIPWIRE=1 "$bin" gate --model wan22-tiny --manifest "$tmp/$name.json" --plugin "$tmp/$name.so" \
    --split val --max-prompts 1 --out "$tmp/out/$name" --cache-dir "$tmp/cache" "${extra[@]}" "$@" --json \
    >"$tmp/$name-verdict.json" 2>"$tmp/$name.log"
  rc=$?
  set -e
  [ $rc -ne 134 ] || fail "$name: a trusted process loaded the plugin (tripwire): $(tail -5 "$tmp/$name.log")"
}
check() {  # check NAME PYTHON: runs PYTHON with v = the verdict
  python3 - "$tmp/$1-verdict.json" "$1" "$sandbox" <<PY || fail "$1: $(reasons "$1")"
import json, sys
v = json.load(open(sys.argv[1]))
name, sandboxed = sys.argv[2], sys.argv[3] == "1"
checks = v["gates"]
failed = sorted(n for n, c in checks.items() if not c["pass"])
workers = v["integrity"]["generation_workers"]
assert [w["label"] for w in workers] == ["candidate", "baseline"], workers
assert workers[0]["isolation"] == ("bwrap sandbox" if sandboxed else "process (no OS sandbox on this machine)"), workers
assert workers[0]["runs"] > 0 and workers[1]["runs"] > 0, workers
$2
print(name + ":", "ACCEPTED" if v["accepted"] else "rejected by " + ", ".join(failed), "%.3fx" % v["speedup"])
PY
}

gate step_reuse
reasons() {  # reasons NAME: the failed gates of NAME's verdict, one line each
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1])); [print(n+": "+c["reason"]) for n,c in v["gates"].items() if not c["pass"]]' \
    "$tmp/$1-verdict.json" 2>&1 || tail -5 "$tmp/$1.log"
}
[ $rc -eq 0 ] || fail "step_reuse was not accepted (exit $rc): $(reasons step_reuse)"
check step_reuse 'assert v["accepted"] and v["speedup"] > 1, v["speedup"]
assert workers[0]["plugin"] == json.load(open(sys.argv[1].replace("-verdict.json", ".json")))["plugin"]
# No --plugin-run-timeout: ten times the clip of the baseline warm-up, at least a minute, not the old hour
assert 60 <= workers[0]["run_timeout_s"] < 3600, workers[0]["run_timeout_s"]'

gate busy_thread
[ $rc -eq 1 ] || fail "busy_thread: exit $rc, not rejected: $(reasons busy_thread)"
check busy_thread 'assert "authenticity" in failed, failed
assert "untimed work in the plugin" in json.dumps(checks["authenticity"]), checks["authenticity"]["reason"]'

gate memoise
[ $rc -eq 1 ] || fail "memoise: exit $rc, not rejected"
check memoise 'assert "performance" in failed, failed'

gate peek_baseline
[ $rc -eq 1 ] || fail "peek_baseline: exit $rc, not rejected"
check peek_baseline 'assert "performance" in failed, failed'
log="$tmp/out/peek_baseline/candidate-worker.log"
[ "$(grep -c '^peek_baseline: ' "$log")" -eq 3 ] || fail "peek_baseline did not look: $(cat "$log")"
if [ $sandbox -eq 1 ] && grep -q VISIBLE "$log"; then fail "the sandboxed plugin saw the gate's files: $(grep VISIBLE "$log")"; fi

# Counters a plugin inflated: its floors met on paper, its speedup beyond what a cache (which makes no block cheaper)
# running every block it claims can reach. Authenticity rejects it when that excess passes the noise slack (a half
# or twice the noise margin: 3 of 4 gates here); its frames fail quality in any case.
gate claim_work
[ $rc -eq 1 ] || fail "claim_work: exit $rc, not rejected: $(reasons claim_work)"
check claim_work 'cost = checks["authenticity"]["details"]["cache_cost"]
assert cost["block_share"] == 1.0 and cost["speedup"] > cost["bound"], cost
assert failed, failed
if "authenticity" in failed:
    assert "the counts claim work that was not done" in checks["authenticity"]["reason"], checks["authenticity"]["reason"]
else:
    print("claim_work: its speedup", cost["speedup"], "within the noise slack of the bound", cost["allowed"], "this time")
assert "warm-up" not in checks["authenticity"]["reason"], "the floors were to pass on paper: " + checks["authenticity"]["reason"]'

# A lower resolution inside a technique, every counter honest: the frames give it away.
gate half_frames
[ $rc -eq 1 ] || fail "half_frames: exit $rc, not rejected: $(reasons half_frames)"
check half_frames 'assert "quality" in failed, failed'

# Clocks tampered with: refused by the kernel inside the sandbox; the gate times with its own monotonic clock.
if [ $sandbox -eq 1 ]; then
  gate clock_tamper
  [ $rc -eq 1 ] || fail "clock_tamper: exit $rc, not rejected: $(reasons clock_tamper)"
  check clock_tamper 'assert "performance" in failed, failed'
  log="$tmp/out/clock_tamper/candidate-worker.log"
  for attempt in "clock_settime(CLOCK_REALTIME)" "settimeofday" "adjtimex(ADJ_FREQUENCY)" "clock_settime(CLOCK_MONOTONIC)"; do
    grep -qF "clock_tamper: $attempt: " "$log" || fail "clock_tamper did not try $attempt: $(cat "$log")"
  done
  ! grep -q "ALLOWED" "$log" || fail "the sandbox let a plugin set a clock: $(grep ALLOWED "$log" | sort -u)"
fi

# A plugin that kills its worker: the candidate's failure, a rejection, not the gate's error.
gate crash
[ $rc -eq 1 ] || fail "crash: exit $rc, not a rejection: $(tail -5 "$tmp/crash.log")"
grep -q "candidate generation worker ended" "$tmp/crash-verdict.json" || fail "crash: the verdict does not say how"

# A plugin that never returns: its run fails at the timeout and its worker is killed; a rejection in bounded time.
start=$(date +%s)
gate hang --plugin-run-timeout 15
[ $rc -eq 1 ] || fail "hang: exit $rc, not a rejection: $(tail -5 "$tmp/hang.log")"
grep -q "took over 15 s" "$tmp/hang-verdict.json" || fail "hang: the verdict does not name the timeout"
[ $(($(date +%s) - start)) -lt 120 ] || fail "hang: the gate took $(($(date +%s) - start)) s"

# A manifest whose plugin the gate was not given: refused before anything runs.
set +e
"$bin" gate --model wan22-tiny --manifest "$tmp/memoise.json" --plugin "$tmp/step_reuse.so" --split val \
  --max-prompts 1 --out "$tmp/out/unknown" "${extra[@]}" >"$tmp/unknown.log" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] || fail "a manifest of a plugin not given: exit $rc"
grep -q "is not loaded\|was not given" "$tmp/unknown.log" || fail "the refusal does not say why: $(cat "$tmp/unknown.log")"
echo "plugin gate: ok"
