#!/usr/bin/env bash
# `autooptim run --agent` end to end on the embedded model (docs/agents.md): the honest scripted agent takes the
# cache family, the hostile one the sparse family (every attack in turn, then daemons left behind as it exits), the
# kernel family keeps its built-in searcher. Checks: the run ends normally; the honest agent's proposal went
# through the gates (a verdict in the report); each of the hostile agent's breaches that the channel or the
# sandbox's limits stopped is named in the report; the ledger, the gate folders and the repository hold nothing
# the agents wrote; no agent process outlives the run. Run it from a folder outside /tmp: the sandbox has a /tmp of
# its own, so a hostile write to a run folder under /tmp lands there and reads as LEAKED. On 2 cores it needs the
# machine to itself: beside another whole run (Cli.RunOnTheTinyModel...) its trials took 20 s instead of 2 and
# the exploration deadline stopped every executor.
# Exit 77 (skipped) where no sandbox can be made here.
# Usage: test_agent_run.sh AUTOOPTIM SOURCE_DIR
set -euo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
bwrap --unshare-all --die-with-parent --ro-bind / / true 2>/dev/null || { echo "skipped: no sandbox here"; exit 77; }
tmp=$(mktemp -d "$PWD/agent-run-XXXXXX")
cleanup() {
  pkill -f hostile-agent-outlive-$$-end 2>/dev/null || true
  [ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
repo_sums() {
  sha256sum "$src/prompts/wan22-tiny/heldout.jsonl" "$src/prompts/wan22-tiny/visible.jsonl" \
    "$src/manifests/wan22-tiny/baseline.json"
}
repo_sums >"$tmp/repo.before"
heldout_id=$(sed -n '1s/^{"id":"\([^"]*\)".*/\1/p' "$src/prompts/wan22-tiny/heldout.jsonl")
run="$tmp/run"
set +e
# The agents come from a run configuration file (--config), the rest from the command line.
cat >"$tmp/run.toml" <<TOML
agent = ["cache=sh $src/tests/agents/honest_agent.sh {brief}",
         "sparse=bash $src/tests/agents/hostile_agent.sh all $src $run $$ $heldout_id 9"]
agent-only = true
agent-bind = ["$src/tests/agents"]
TOML
timeout 900 "$bin" run --model wan22-tiny --out "$run" --budget-minutes 6 --budget-trials 5 --executor-trials 2 \
  --no-deploy-check --config "$tmp/run.toml" >"$tmp/run.log" 2>&1
rc=$?
set -e
[ $rc -eq 0 ] || fail "run exited $rc: $(tail -n 20 "$tmp/run.log")"
report="$run/report.json"
python3 - "$report" "$heldout_id" <<'PY' || fail "the report's agents section (above)"
import json, sys
r = json.load(open(sys.argv[1]))
agents = {a["name"]: a for a in r["agents"]}
assert set(agents) == {"agent-cache", "agent-sparse"}, agents.keys()
honest, hostile = agents["agent-cache"], agents["agent-sparse"]
assert honest["sandbox"] == "bubblewrap" and hostile["sandbox"] == "bubblewrap"
verdicts = honest["proposal_verdicts"]
assert verdicts and verdicts[0]["gated"], verdicts
assert any(c["tool"] == "trial" and c["ok"] for c in honest["tool_calls"])
blocked = " | ".join(b["what"] + ": " + b["detail"] for b in hostile["blocked_events"])
for needle in ["outside the visible set ('%s')" % sys.argv[2], "kind 'baseline'", "family 'cache'", "budget",
               "wan22-tiny/heldout.jsonl (a decoy"]:
    assert needle in blocked, (needle, blocked)
families = {c["family"] for c in r["candidates"] if c["gated"]}
assert "kernel" in families and "cache" in families, families
print("agents section ok:", len(honest["tool_calls"]), "and", len(hostile["tool_calls"]), "tool calls;", blocked[:300])
PY
grep -q "^## Agents" "$run/report.md" || fail "report.md has no agents section"
grep -q "outside the visible set" "$run/report.md" || fail "report.md does not name the held-out trial"
grep -q "Agents" "$run/report.html" || fail "report.html has no agents section"
! grep -rq "forged" "$run/ledger.jsonl" "$run/gates" 2>/dev/null || fail "an agent's write reached the run folder"
! grep -q "^LEAKED" "$run/agents/agent-sparse/transcript.log" || fail "$(grep '^LEAKED' "$run/agents/agent-sparse/transcript.log")"
grep -q "^BLOCKED read-heldout-path" "$run/agents/agent-sparse/transcript.log" || fail "the hostile agent did not run"
repo_sums | diff "$tmp/repo.before" - >/dev/null || fail "the repository's prompts or baseline changed"
pgrep -f hostile-agent-outlive-$$-end >/dev/null && fail "an agent process outlived the run"
echo "agent run ok"
