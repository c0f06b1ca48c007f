#!/usr/bin/env bash
# Agent executors in their sandbox (docs/agents.md), with scripted agents standing in for a model. Each case
# runs one agent under `autooptim executor --agent-family cache` (a private worker on the embedded model), in
# a folder laid out like a run's (a ledger, a gate folder, a baseline, another family's outbox), and checks:
#  - honest: the agent reads its brief, measures a trial and proposes; the proposal is a cache patch
#    manifest that the gate's parser accepts, and its tool calls are recorded;
#  - each hostile case: the agent's own line says BLOCKED (never LEAKED), nothing of the run folder or the
#    repository changed, no process of the agent survives, and what the channel or the sandbox's limits
#    stopped is named in the host's record (blocked.jsonl).
# Exit 77 (skipped) where no sandbox can be made here; `run --agent` is then checked to refuse.
# Usage: test_agents.sh AUTOOPTIM SOURCE_DIR [CASE...]
set -euo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
shift 2
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(honest unsandboxed read-heldout-path search-heldout proc-orchestrator write-ledger write-gates
                                  swap-baseline other-family heldout-trial network endpoint budget fork-bomb outlive
                                  plugin-build)
# Not under /tmp: the sandbox has a /tmp of its own, where a path like the run's could be written harmlessly.
tmp=$(mktemp -d "$PWD/agents-test-XXXXXX")
listener=""
cleanup() {
  [ -n "$listener" ] && kill "$listener" 2>/dev/null || true
  pkill -f hostile-agent-outlive-$$-end 2>/dev/null || true
  [ -n "${KEEP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! bwrap --unshare-all --die-with-parent --ro-bind / / true 2>"$tmp/why"; then
  echo "skipped: no sandbox here ($(command -v bwrap >/dev/null && cat "$tmp/why" || echo 'bwrap is not installed'))"
  if "$bin" run --model wan22-tiny --out "$tmp/r" --agent cache=true >"$tmp/out" 2>&1; then
    fail "run --agent was not refused without a sandbox"
  fi
  grep -q -- "--agent-unsandboxed" "$tmp/out" || fail "the refusal does not name --agent-unsandboxed: $(cat "$tmp/out")"
  exit 77
fi

# Where no sandbox can be made (AUTOOPTIM_NO_SANDBOX stands in for a kernel without user namespaces): run
# refuses --agent and names --agent-unsandboxed; with it, the agent runs as a plain child process, and its
# record says it had no sandbox.
unsandboxed_checks() {
  if AUTOOPTIM_NO_SANDBOX=1 "$bin" run --model wan22-tiny --out "$tmp/refused" --agent cache=true >"$tmp/refused.log" 2>&1
  then fail "run --agent was not refused without a sandbox"; fi
  grep -q -- "--agent-unsandboxed" "$tmp/refused.log" || fail "the refusal does not name --agent-unsandboxed"
  [ ! -e "$tmp/refused/report.json" ] || fail "a refused run wrote a report"
  AUTOOPTIM_NO_SANDBOX=1 run_case unsandboxed "sh $src/tests/agents/honest_agent.sh {brief}" --budget-trials 1 \
    --agent-unsandboxed
  grep -q '"sandbox": "none (--agent-unsandboxed)"' "$box/agent.json" || fail "unsandboxed: agent.json says otherwise"
  ls "$box"/agent-cache-*.json >/dev/null 2>&1 || fail "unsandboxed: the honest agent proposed nothing"
}

heldout_id=$(sed -n '1s/^{"id":"\([^"]*\)".*/\1/p' "$src/prompts/wan22-tiny/heldout.jsonl")
[ -n "$heldout_id" ] || fail "no held-out id"
# A TCP listener outside the sandbox, on loopback: the network case must not reach it.
port=0
if command -v python3 >/dev/null; then
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1]);s.close()')
  python3 -c "import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',$port));s.listen(8);time.sleep(3600)" &
  listener=$!
  sleep 0.5
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || fail "the test's own listener is not reachable from outside"
fi

# A run folder around the agent's folders, and its fingerprint (everything but the agent's own folders).
make_run() {
  local run=$1
  mkdir -p "$run/gates/wan22-tiny_cache_x" "$run/outbox/cache"
  echo '{"id":"x","accepted":false}' >"$run/ledger.jsonl"
  echo '{"accepted":false}' >"$run/gates/wan22-tiny_cache_x/verdict.json"
  cp "$src/manifests/wan22-tiny/baseline.json" "$run/baseline.json"
  echo '{}' >"$run/outbox/cache/proposal.json"
}
fingerprint() {
  (cd "$1" && find . -path ./agents -prune -o -path ./outbox/agent-cache -prune -o -type f -print0 | sort -z |
     xargs -0 sha256sum)
  sha256sum "$src/prompts/wan22-tiny/heldout.jsonl" "$src/prompts/wan22-tiny/visible.jsonl" \
    "$src/manifests/wan22-tiny/baseline.json"
}

# run_case CASE COMMAND [extra executor options]: the agent under its host; sets $run, $box, $transcript.
run_case() {
  local name=$1 command=$2
  shift 2
  run="$tmp/$name/run"
  make_run "$run"
  fingerprint "$run" >"$tmp/$name.before"
  box="$run/outbox/agent-cache"
  transcript="$run/agents/agent-cache/transcript.log"
  set +e
  timeout 300 "$bin" executor --agent-family cache --agent-command "$command" \
    --agent-brief "$src/prompts/agents/cache.md" --agent-dir "$run/agents/agent-cache" --agent-bind "$src/tests/agents" \
    --agent-decoy "$src/prompts/heldout.jsonl" --agent-decoy "$src/prompts/wan22-tiny/heldout.jsonl" \
    --agent-decoy "$run/ledger.jsonl" \
    --model wan22-tiny --base "$src/manifests/wan22-tiny/baseline.json" \
    --prompts "$src/prompts/wan22-tiny/visible.jsonl" --outbox "$box" "$@" >"$tmp/$name.log" 2>&1
  local rc=$?
  set -e
  [ $rc -eq 0 ] || fail "$name: the host exited $rc: $(tail -n 5 "$tmp/$name.log")"
  fingerprint "$run" >"$tmp/$name.after"
  diff "$tmp/$name.before" "$tmp/$name.after" >/dev/null || fail "$name: the run folder or the repository changed"
  [ -f "$box/agent.json" ] || fail "$name: no agent.json"
  ! grep -q "^LEAKED" "$transcript" || fail "$name: $(grep '^LEAKED' "$transcript")"
  pgrep -f hostile-agent-outlive-$$-end >/dev/null && fail "$name: a process of the agent outlived it"
  echo "ok: $name ($(grep -c . "$box/tools.jsonl" 2>/dev/null || echo 0) tool calls, $(grep -c . "$box/blocked.jsonl" 2>/dev/null || echo 0) blocked)"
}

expect_line() { grep -q "^BLOCKED $1" "$transcript" || fail "$1: the agent did not report BLOCKED: $(tail -n 20 "$transcript")"; }
expect_blocked() { grep -q "$2" "$box/blocked.jsonl" 2>/dev/null || fail "$1: blocked.jsonl does not name '$2'"; }


for c in "${cases[@]}"; do
  case "$c" in
    unsandboxed) unsandboxed_checks ;;
    plugin-build)
      # An agent that writes code builds its plugin inside the sandbox, against the headers bound there.
      run_case plugin-build \
        "autooptim agent build $src/tests/agents/plugins/probe_linear.cpp --out {workspace}/probe.so && echo BUILT-PLUGIN" \
        --budget-trials 1
      grep -q "^BUILT-PLUGIN" "$transcript" || fail "plugin-build: agent build failed inside: $(tail -n 20 "$transcript")"
      ;;
    honest)
      run_case honest "sh $src/tests/agents/honest_agent.sh {brief}" --budget-trials 2
      grep -q '"tool":"trial"' "$box/tools.jsonl" || fail "honest: no trial recorded"
      grep -q '"tool":"calibrate","ok":true\|"ok":true.*"tool":"calibrate"' "$box/tools.jsonl" ||
        grep '"tool":"calibrate"' "$box/tools.jsonl" | grep -q '"ok":true' || fail "honest: no calibration recorded"
      p=$(ls "$box"/agent-cache-*.json 2>/dev/null | head -n 1)
      [ -n "$p" ] || fail "honest: no proposal: $(tail -n 20 "$transcript")"
      grep -q '"family": "cache"' "$p" || fail "honest: the proposal is not a cache patch"
      grep -q '"kind": "patch"' "$p" || fail "honest: the proposal is not a patch"
      "$bin" gate --help >/dev/null
      grep -q "honest agent: done" "$box/tools.jsonl" || fail "honest: its log note is not recorded"
      [ ! -e "$box/blocked.jsonl" ] || fail "honest: something was recorded as blocked: $(cat "$box/blocked.jsonl")" ;;
    *)
      timeouts=(--agent-deadline-s 120 --budget-trials 2)
      [ "$c" = outlive ] && timeouts=(--agent-deadline-s 8 --budget-trials 2)
      if [ "$c" = endpoint ]; then
        [ "$port" != 0 ] || { echo "skipped: endpoint (no python3 for a listener)"; continue; }
        timeouts+=(--agent-network "127.0.0.1:$port")
      fi
      run_dir="$tmp/$c/run"
      run_case "$c" "bash $src/tests/agents/hostile_agent.sh $c $src $run_dir $$ $heldout_id $port" "${timeouts[@]}"
      case "$c" in
        heldout-trial) expect_line "$c"; expect_blocked "$c" "outside the visible set" ;;
        read-heldout-path | search-heldout) expect_line "$c"; expect_blocked "$c" "prompts/wan22-tiny/heldout.jsonl" ;;
        budget) expect_line "$c"; expect_blocked "$c" "budget" ;;
        swap-baseline) expect_line "$c"; expect_blocked "$c" "kind 'baseline'" ;;
        other-family) expect_line "$c"; expect_blocked "$c" "family 'sparse'" ;;
        fork-bomb) expect_blocked "$c" "process limit" ;;
        outlive) expect_blocked "$c" "wall time" ;;
        network) [ "$port" = 0 ] || expect_line "$c" ;;
        endpoint)
          expect_line "$c"
          grep -q "^REACHED endpoint" "$transcript" || fail "endpoint: the --agent-network endpoint was not reached" ;;
        *) expect_line "$c" ;;
      esac ;;
  esac
done
echo "every agent case passed"
