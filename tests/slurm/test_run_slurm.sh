#!/usr/bin/env bash
# ctest slurm_run: `autooptim run --launcher slurm --workers 2` end to end on a real single-node Slurm
# (cluster.sh, started here and stopped on exit). The tiny model at a reduced shape with CPU workers:
#   - the workers run as the tasks of a Slurm job array (squeue/sacct), register in the run folder and do
#     the run's trials and gate runs;
#   - a job of the higher-tier partition pre-empts every running worker task at once while the baseline
#     is gated: PREEMPTED, replaced (the replacements wait for that job), and the run goes on;
#   - then one worker task is cancelled (scancel) while it has a gate request in progress: the worker puts
#     the request back, another worker answers it, the launcher replaces the task, and the run still
#     finishes with a report that records every death and no gate verdict recorded twice;
#   - the report is read by `autooptim compare` (itself: exit 0; a copy whose baseline got slower: exit 1).
# Skipped (77) without Slurm or root. Usage: test_run_slurm.sh AUTOOPTIM_BINARY SOURCE_DIR
set -uo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
here=$(cd "$(dirname "$0")" && pwd)
command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null || { echo "SKIP: slurm-wlm/munge not installed"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }

work=$(mktemp -d /tmp/autooptim-slurm-run.XXXXXX)
run="$work/run"
runpid=""
cleanup() {
  local rc=$?
  if [ -n "$runpid" ] && kill -0 "$runpid" 2>/dev/null; then kill -TERM "$runpid"; wait "$runpid" 2>/dev/null; fi
  "$here/cluster.sh" stop "$work/cluster" >/dev/null 2>&1
  if [ $rc -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$work"; else echo "left for a look: $work"; fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- run stderr (tail)"; tail -n 30 "$work/run.err" 2>/dev/null
  echo "--- squeue"; squeue -h -r -t all -o "%i %T %N %r" 2>/dev/null
  exit 1
}
# A string field of a one-line JSON file (heartbeats and responses are written compact).
field() { sed -n "s/.*\"$2\":\"\\([^\"]*\\)\".*/\\1/p" "$1" 2>/dev/null | head -n 1; }

"$here/cluster.sh" start "$work/cluster" >/dev/null || fail "the Slurm cluster did not start"
export SLURM_CONF="$work/cluster/slurm.conf"

cd "$src"
export AUTOOPTIM_LOAD_LOG="$work/loads.log"   # sbatch passes the environment on to the worker tasks
"$bin" run --model wan22-tiny --frames 17 --steps 8 --height 96 --width 160 --max-prompts 1 --repeats 1 --executor-trials 2 \
  --budget-trials 10 --budget-minutes 8 --launcher slurm --workers 2 --worker-dead-after 20 --out "$run" \
  >"$work/run.out" 2>"$work/run.err" &
runpid=$!

# Pre-emption: a job of the higher-tier partition "urgent" takes both CPUs, so Slurm pre-empts every
# running worker task at once (PREEMPTED); the launcher replaces them, the replacements wait for the
# urgent job, and the run goes on from the queue.
# First thing, while the baseline's gate run (which everything else needs) is in progress.
for _ in $(seq 1 1200); do
  grep -qs '"request":"' "$run"/workers/slurm-*/heartbeat.json && break
  kill -0 "$runpid" 2>/dev/null || break
  sleep 0.25
done
kill -0 "$runpid" 2>/dev/null || fail "the run ended before the pre-emption could be tested (raise --budget-trials)"
urgent=$(sbatch --parsable -p urgent -c "$(nproc)" -o /dev/null --wrap 'sleep 5') || fail "sbatch -p urgent failed"
for _ in $(seq 1 240); do
  squeue -h -r -t all -n autooptim-workers -o %T | grep -q PREEMPTED && break
  sleep 0.25
done
preempted=$(squeue -h -r -t all -n autooptim-workers -o "%i %T" | awk '$2 == "PREEMPTED" {print $1}' | tr '\n' ' ')
[ -n "$preempted" ] || fail "job $urgent pre-empted no worker task"
echo "urgent job $urgent pre-empted worker task(s) $preempted"

# Cancel a worker task while it has a request in progress (early in a gate run); the worker says which
# request it put back. (If it still finished the request before the signal, nothing was put back: try
# the next busy worker, at most three times.)
victim="" requeued="" cancelled_tasks=""
for attempt in 1 2 3; do
  requeued=""
  for _ in $(seq 1 1200); do
    kill -0 "$runpid" 2>/dev/null || break
    for hb in "$run"/workers/slurm-*/heartbeat.json; do
      [ -f "$hb" ] || continue
      req=$(field "$hb" request)
      [ -n "$req" ] || continue
      # A gate run before its last two generations: the worker checks for a signal before each generation
      # and leaves at the next one, so the signal lands mid-request even with a heartbeat up to 1 s old.
      # (Requiring the first 3 runs of 8 left too short a window on a fast machine: a CI run ended first.)
      kn=$(field "$hb" stage | sed -n 's/.*(run \([0-9]*\)\/\([0-9]*\)).*/\1 \2/p')
      [ -n "$kn" ] && [ "${kn% *}" -le $(( ${kn#* } - 2 )) ] || continue
      w=$(basename "$(dirname "$hb")")
      # A worker that is gone keeps its last heartbeat: only a running task is a victim.
      [ "$(squeue -h -t R -j "$(echo "$w" | sed 's/^slurm-\([0-9]*\)-\([0-9]*\)$/\1_\2/')" -o %T 2>/dev/null)" = RUNNING ] || continue
      victim=$w
      break 2
    done
    sleep 0.25
  done
  [ -n "$victim" ] || fail "no Slurm worker ever had a request in progress (run exited: $(kill -0 "$runpid" 2>/dev/null && echo no || echo yes))"
  task=$(echo "$victim" | sed 's/^slurm-\([0-9]*\)-\([0-9]*\)$/\1_\2/')
  scancel "$task" || fail "scancel $task failed"
  cancelled_tasks="$cancelled_tasks $task"
  log="$run/slurm/worker-$task.log"
  for _ in $(seq 1 120); do
    [ "$(squeue -h -t all -j "$task" -o %T 2>/dev/null)" = CANCELLED ] && break
    sleep 0.25
  done
  sleep 1
  requeued=$(sed -n 's/.*leaving: request \([^ ]*\) put back in the queue.*/\1/p' "$log" | head -n 1)
  [ -n "$requeued" ] && break
  echo "note: $victim finished its request before the signal; cancelling another"
  victim=""
done
[ -n "$requeued" ] || fail "no cancelled worker put a request back (logs: $cancelled_tasks)"
echo "cancelled $victim ($task) while it ran request $requeued"


wait "$runpid"
rc=$?
runpid=""
[ $rc -eq 0 ] || fail "autooptim run exited $rc"
report="$run/report.json"
[ -f "$report" ] || fail "no report.json"

# The cancelled worker's request was answered by another worker: nothing it had was lost.
resp="$run/responses/$requeued.json"
[ -f "$resp" ] || fail "request $requeued was never answered"
by=$(field "$resp" worker)
[ -n "$by" ] && [ "$by" != "$victim" ] || fail "request $requeued answered by '$by', expected another worker than $victim"
grep -q '"ok":true' "$resp" || fail "request $requeued answered with an error: $(cat "$resp")"
echo "request $requeued re-queued and answered by $by"

# The workers ran as Slurm jobs: the array, its tasks, the cancelled one and the replacement.
# The first submission is the array of both workers; every later one a single replacement task.
states=$(squeue -h -r -t all -n autooptim-workers -o "%i %T")
array=$(echo "$preempted" | awk '{print $1}' | cut -d_ -f1)
echo "$states" | grep -q "^${array}_0 " && echo "$states" | grep -q "^${array}_1 " || fail "the array's two tasks unknown to Slurm: $states"
for t in $preempted; do echo "$states" | grep -q "^$t PREEMPTED" || fail "$t not PREEMPTED: $states"; done
echo "$states" | grep -q "^$task CANCELLED" || fail "$task not CANCELLED: $states"
[ "$(sacct -c -n -P -o jobname 2>/dev/null | grep -c '^autooptim-workers$')" -ge 3 ] ||
  fail "Slurm's job records (sacct -c) hold fewer than 3 worker jobs (2 tasks + replacements): $(sacct -c -n -P -o jobid,jobname,state 2>/dev/null)"
[ -z "$(squeue -h -t PD,R,CG -o %i)" ] || fail "worker tasks still queued or running after the run: $(squeue -h -o '%i %T')"

# The report: Slurm launcher, the death and the replacement, gate runs done on the Slurm workers.
grep -q '"kind": "slurm"' "$report" || fail "report has no Slurm launcher block"
grep -q "replaced by slurm-" "$report" || fail "report does not record the replacement of $victim"
grep -q "worker $victim died" "$report" || fail "report's worker_events lack $victim's death"
for t in $preempted; do
  grep -q "task $t ended PREEMPTED" "$report" || fail "report does not record the pre-emption of $t"
done
grep -q "^## Slurm" "$run/report.md" && grep -q "CANCELLED" "$run/report.md" || fail "report.md has no Slurm section with the cancelled task"
# Nothing finished was lost or done twice: one ledger row per manifest and split.
dups=$(sed -n 's/.*"manifest_hash":"\([^"]*\)".*"split":"\([^"]*\)".*/\1 \2/p' "$run/ledger.jsonl" | sort | uniq -d)
[ -z "$dups" ] || fail "gate verdicts recorded twice in the ledger: $dups"
grep -Eq '"worker": "slurm-[0-9]+-[0-9]+"' "$report" || fail "no candidate was gated by a Slurm worker"
grep -Eq '^  "gate_runs": [1-9]' "$report" || fail "nothing was gated"

# One model load per worker task that started, none in the orchestrator or the executors: every line of
# the load log is a pid of a process that ran as a Slurm worker.
loads=$(wc -l < "$work/loads.log")
started=$(squeue -h -r -t all -n autooptim-workers -o %i | wc -l)
[ "$loads" -le "$started" ] && [ "$loads" -ge 2 ] || fail "$loads model loads for $started worker tasks: $(cat "$work/loads.log")"
for pid in $(cut -d' ' -f1 "$work/loads.log"); do
  grep -rqs "\"pid\": *$pid[,}]" "$run"/workers/slurm-*/worker.json || fail "model loaded by pid $pid, which is no Slurm worker"
done

# compare reads the real report: no regression against itself; a baseline three times slower is one.
"$bin" compare "$report" "$report" >"$work/cmp-same.txt" || fail "compare of a report with itself: exit $? ($(cat "$work/cmp-same.txt"))"
sed 's/"seconds": \([0-9.e+-]*\)/"seconds": 1000\1/' "$report" >"$work/slower.json"
"$bin" compare "$report" "$work/slower.json" >"$work/cmp-slower.txt"
crc=$?
[ $crc -eq 1 ] || fail "compare with a much slower baseline: exit $crc, expected 1 ($(cat "$work/cmp-slower.txt"))"
grep -q "REGRESSION\|regression" "$work/cmp-slower.txt" || fail "compare did not name the regression"
echo "PASS: run --launcher slurm finished with a cancelled worker's request re-queued ($requeued: $victim -> $by)"
