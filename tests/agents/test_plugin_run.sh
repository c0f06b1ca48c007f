#!/usr/bin/env bash
# `autooptim run --agent` with an agent that writes code (issue 42, docs/agents.md): the scripted plugin agent
# (plugin_agent.sh) takes the cache family, builds step_reuse.cpp into a plugin inside its sandbox, hands it over,
# measures it with a trial and proposes it; the kernel family keeps its built-in searcher. With
# AUTOOPTIM_PLUGIN_TRIPWIRE set for the whole run, step_reuse aborts any process but a generation worker that
# loads it, so a run that ends normally proves that the orchestrator, the executors and the run's workers never
# loaded it. Checks: the plugin kept in the agent's outbox under its sha256; the trial measured (a speedup, the
# reuse engaged); the proposal pins the plugin and was gated by a sandboxed candidate worker (its verdict names
# the generation workers); the hostile turns (a link, a file that is not a plugin) refused, the link recorded as
# blocked. Exit 77 (skipped) where no sandbox can be made here.
# Usage: test_plugin_run.sh AUTOOPTIM SOURCE_DIR
set -euo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
# Where no sandbox can be made (the GPU machine), PLUGIN_RUN_UNSANDBOXED=1 runs the same with --agent-unsandboxed:
# the agent and the plugin's workers are then plain processes (the verdicts say so).
isolation="bwrap sandbox"
unsandboxed=()
if ! bwrap --unshare-all --die-with-parent --ro-bind / / true 2>/dev/null; then
  [ -n "${PLUGIN_RUN_UNSANDBOXED:-}" ] || { echo "skipped: no sandbox here"; exit 77; }
  isolation="process (no OS sandbox on this machine)"
  unsandboxed=(--agent-unsandboxed)
  # There the binary's libraries may come from LD_LIBRARY_PATH, which an agent gets only when named.
  [ -z "${LD_LIBRARY_PATH:-}" ] || unsandboxed+=(--agent-env LD_LIBRARY_PATH)
fi
command -v c++ >/dev/null || command -v g++ >/dev/null || { echo "skipped: no C++ compiler"; exit 77; }
tmp=$(mktemp -d "$PWD/plugin-run-XXXXXX")
cleanup() { [ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run="$tmp/run"
set +e
# 8 budget minutes: the exploration deadline is half of what the baseline's gate leaves, and beside the rest of the
# suite on 2 cores (trials 3 to 5 times slower) 4 minutes stopped every executor before the agent proposed (CI).
AUTOOPTIM_PLUGIN_TRIPWIRE=1 timeout 1200 "$bin" run --model wan22-tiny --out "$run" --budget-minutes 8 \
  --budget-trials 5 --executor-trials 2 --no-deploy-check --agent-only --agent-bind "$src/tests/agents" \
  --agent "cache=sh $src/tests/agents/plugin_agent.sh {brief} $src" "${unsandboxed[@]}" >"$tmp/run.log" 2>&1
rc=$?
set -e
[ $rc -eq 0 ] || fail "run exited $rc: $(tail -n 20 "$tmp/run.log")"
# (the plugin's source, copied into the workspace, holds the same words: not searched)
! grep -rqI --exclude="*.cpp" "TRIPWIRE: step_reuse was loaded" "$run" "$tmp/run.log" ||
  fail "a trusted process loaded the plugin: $(grep -rhI --exclude="*.cpp" "TRIPWIRE: step_reuse" "$run" "$tmp/run.log" | head -3)"
transcript="$run/agents/agent-cache/transcript.log"
! grep -q "ignoring a malformed proposal" "$tmp/run.log" || fail "$(grep "ignoring a malformed proposal" "$tmp/run.log")"
grep -q "^PLUGIN [0-9a-f]\{64\}$" "$transcript" || fail "the plugin was not handed over: $(tail -n 20 "$transcript")"
sha=$(sed -n 's/^PLUGIN \([0-9a-f]*\)$/\1/p' "$transcript")
kept="$run/outbox/agent-cache/plugins/$sha.so"
[ -f "$kept" ] || fail "no copy of the plugin at $kept"
[ "$(sha256sum "$kept" | cut -d' ' -f1)" = "$sha" ] || fail "the kept plugin is not the file its name pins"
grep -q "^PROPOSED" "$transcript" || fail "no proposal: $(tail -n 20 "$transcript")"
grep -q "^BLOCKED plugin-link" "$transcript" || fail "a link was taken as a plugin"
grep -q "^BLOCKED plugin-fake" "$transcript" || fail "a file that is not a plugin was taken"
! grep -q "^LEAKED" "$transcript" || fail "$(grep '^LEAKED' "$transcript")"
grep -q "a link" "$run/outbox/agent-cache/blocked.jsonl" || fail "the link was not recorded as blocked"
python3 - "$run" "$sha" "$isolation" <<'PY' || fail "the plugin's trial, proposal or gate (above)"
import glob, json, os, sys
run, sha = sys.argv[1], sys.argv[2]
trial = [l for l in open(os.path.join(run, "agents/agent-cache/transcript.log")) if l.startswith("TRIAL ")][0]
t = json.loads(trial[len("TRIAL "):])
assert t["speedup"] > 1.0 and t["not_engaged"] == [], t
proposals = glob.glob(os.path.join(run, "outbox/agent-cache/agent-cache-*.json"))
assert len(proposals) == 1, proposals
m = json.load(open(proposals[0]))
assert m["plugin"] == sha and m["flags"]["step_reuse"]["enabled"] is True, m
r = json.load(open(os.path.join(run, "report.json")))
agent = {a["name"]: a for a in r["agents"]}["agent-cache"]
v = agent["proposal_verdicts"]
assert v and v[0]["gated"], v
verdicts = glob.glob(os.path.join(run, "gates", "*agent-cache*", "*", "verdict.json"))
assert verdicts, "no gate folder of the proposal"
seen = False
for f in verdicts:
    d = json.load(open(f))
    workers = d.get("integrity", {}).get("generation_workers", [])
    assert workers, (f, "the plugin's gate ran without its sandboxed workers")
    assert {w["label"] for w in workers} == {"candidate", "baseline"}, workers
    assert any(w.get("plugin") == sha for w in workers), workers
    assert all(w["isolation"] == sys.argv[3] for w in workers), workers
    seen = True
    print("gated in sandboxed workers:", f.split("/gates/")[1], d.get("accepted"), d.get("speedup"))
assert seen
print("trial %.3fx at %.1f dB; proposal pins %s" % (t["speedup"], t["psnr_min"], sha[:12]))
PY
echo "plugin run ok"
