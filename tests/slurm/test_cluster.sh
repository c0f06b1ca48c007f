#!/usr/bin/env bash
# ctest slurm_cluster: the single-node Slurm of cluster.sh comes up, runs a batch job to completion, records
# it (sacct --completion) and stops with nothing left running. Skipped (77) where Slurm is not installed or
# this is not root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v slurmctld >/dev/null && command -v munged >/dev/null || { echo "SKIP: slurm-wlm/munge not installed"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

dir=$(mktemp -d /tmp/autooptim-slurm-test.XXXXXX)
trap '"$here/cluster.sh" stop "$dir"' EXIT
"$here/cluster.sh" start "$dir" >/dev/null
export SLURM_CONF=$dir/slurm.conf
[ "$(sinfo -h -n localhost -o %t)" = idle ] || fail "node not idle after start"

job=$(sbatch --parsable --wait -o "$dir/hostname.out" --wrap 'hostname; echo "task done"') || fail "sbatch --wait failed"
grep -qx "$(hostname)" "$dir/hostname.out" || fail "job output lacks the host name: $(cat "$dir/hostname.out")"
grep -q "task done" "$dir/hostname.out" || fail "job did not finish its script"
state=$(squeue -h -t all -j "$job" -o %T)
[ "$state" = COMPLETED ] || fail "job $job state '$state', expected COMPLETED"
sacct -c -n -j "$job" -o jobid,state 2>/dev/null | grep -q COMPLETED || fail "job $job not in the completion records (sacct -c)"

pids="$(cat "$dir/slurmctld.pid") $(cat "$dir/slurmd.pid") $(cat "$dir/munge/munged.pid")"
"$here/cluster.sh" stop "$dir"
trap - EXIT
for p in $pids; do kill -0 "$p" 2>/dev/null && fail "daemon $p still running after stop"; done
rm -rf "$dir"
echo "PASS: job $job ran on the single-node Slurm and the cluster stopped"
