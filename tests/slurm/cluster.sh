#!/usr/bin/env bash
# A single-node Slurm on this machine, from Debian's packages (slurm-wlm, munge), for tests and for trying
# `autooptim run --launcher slurm` without a cluster. Needs root (the daemons run as root, no systemd, no
# cgroups: proctrack/linuxproc, task/none). Everything lives in one folder: its slurm.conf, the munge key and
# socket, state, spool, logs and pid files.
#
#   cluster.sh start DIR      start munged, slurmctld and slurmd; return once `sinfo` shows the node idle
#   cluster.sh stop DIR       cancel what is still queued or running, stop the three daemons (only those
#                             started for DIR, by their pid files)
#   cluster.sh run CMD...     start in a fresh temporary folder, run CMD with SLURM_CONF set, stop on exit
#                             (whatever the exit: a trap), and exit with CMD's status; the folder is removed
#                             when CMD succeeded (KEEP=1 keeps it)
#
# Clients find the cluster through SLURM_CONF=DIR/slurm.conf (start prints the line to export).
set -euo pipefail

die() { echo "cluster.sh: $*" >&2; exit 2; }
log() { echo "cluster.sh: $*" >&2; }

for tool in munged slurmctld slurmd sinfo sbatch squeue scancel; do
  command -v "$tool" >/dev/null || die "$tool not found: install slurm-wlm, slurm-client and munge (bash scripts/install-deps.sh)"
done
[ "$(id -u)" -eq 0 ] || die "needs root (the Slurm daemons of this test cluster run as root)"

# A TCP port on 127.0.0.1 that nothing listens on, from $1 upward (bash's /dev/tcp: no extra tools).
free_port() {
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

start() {
  local dir=$1
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ -e "$dir/slurmctld.pid" ] && pid_alive "$(cat "$dir/slurmctld.pid")" && die "$dir: a cluster is already running there (stop it first)"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 0755 "$dir" "$dir/munge"

  # munge: a fresh key and a daemon of our own on a socket inside DIR (no /etc/munge, no /run/munge).
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
         --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    || die "munged did not start: $(tail -n 3 "$dir/log/munged.log" 2>/dev/null)"

  local cpus mem ctld_port slurmd_port
  cpus=$(nproc)
  # What slurmd itself measures (a node configured with more memory than it has is drained).
  mem=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n 1)
  [ -n "$mem" ] || mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024))
  ctld_port=$(free_port 16817)
  slurmd_port=$(free_port $((ctld_port + 1)))
  cat > "$dir/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh: one node (this machine), one partition, no cgroups, no accounting database.
ClusterName=autooptim-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
# The daemons' own pid files; the ones this script watches are DIR/slurmctld.pid and DIR/slurmd.pid (a
# daemon rewriting its file while the script reads it would look like a daemon that died).
SlurmctldPidFile=$dir/state/slurmctld.daemon.pid
SlurmdPidFile=$dir/spool/slurmd.daemon.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Finished jobs are written here; \`sacct --completion\` reads them (there is no slurmdbd).
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
# Cancelled jobs die quickly; finished jobs stay visible to squeue/scontrol for an hour.
KillWait=5
MinJobAge=3600
InactiveLimit=0
SlurmdTimeout=60
# Pre-emption as clusters do it: a job of the higher-tier partition "urgent" cancels what it needs of
# "debug"'s running jobs (their state: PREEMPTED).
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=1
PartitionName=urgent Nodes=localhost MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=10
EOF
  export SLURM_CONF="$dir/slurm.conf"

  # The daemons in the foreground (-D), each in its own session so that they outlive this script;
  # their pids are written to DIR for stop.
  setsid slurmctld -D -c -f "$SLURM_CONF" >>"$dir/log/slurmctld.out" 2>&1 < /dev/null &
  echo $! > "$dir/slurmctld.pid"
  setsid slurmd -D -N localhost -f "$SLURM_CONF" >>"$dir/log/slurmd.out" 2>&1 < /dev/null &
  echo $! > "$dir/slurmd.pid"

  local state="" i
  for i in $(seq 1 120); do
    pid_alive "$(cat "$dir/slurmctld.pid")" || { stop "$dir"; die "slurmctld exited: $(tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmctld.out" 2>/dev/null)"; }
    pid_alive "$(cat "$dir/slurmd.pid")" || { stop "$dir"; die "slurmd exited: $(tail -n 5 "$dir/log/slurmd.log" "$dir/log/slurmd.out" 2>/dev/null)"; }
    state=$(sinfo -h -n localhost -o %t 2>/dev/null | head -n 1 || true)
    [ "$state" = idle ] && break
    sleep 0.5
  done
  if [ "$state" != idle ]; then
    local why
    why=$(sinfo -h -R 2>/dev/null || true)
    stop "$dir"
    die "the node did not become idle in 60 s (state '${state:-none}'${why:+, $why}); logs in $dir/log"
  fi
  log "up: node localhost idle ($cpus CPUs, $mem MB), partitions debug and urgent (pre-empts debug), ports $ctld_port/$slurmd_port"
  echo "export SLURM_CONF=$SLURM_CONF"
}

# Stops the daemon whose pid is in FILE: SIGTERM, then SIGKILL after 10 s.
stop_pid() {
  local file=$1 pid i
  [ -e "$file" ] || return 0
  pid=$(cat "$file")
  if pid_alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.1; done
    pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

stop() {
  local dir=$1
  [ -d "$dir" ] || return 0
  dir=$(cd "$dir" && pwd)
  if [ -e "$dir/slurm.conf" ] && [ -e "$dir/slurmctld.pid" ] && pid_alive "$(cat "$dir/slurmctld.pid")"; then
    export SLURM_CONF="$dir/slurm.conf"
    # Jobs first: their slurmstepd processes would outlive slurmd.
    if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
      scancel --full --signal=KILL $(squeue -h -o %i 2>/dev/null | sort -u) 2>/dev/null || true
      local i
      for i in $(seq 1 60); do
        [ -z "$(squeue -h -t PD,R,CG,S -o %i 2>/dev/null)" ] && break
        sleep 0.5
      done
    fi
  fi
  stop_pid "$dir/slurmd.pid"
  stop_pid "$dir/slurmctld.pid"
  stop_pid "$dir/munge/munged.pid"
  log "stopped (logs in $dir/log)"
}

case "${1:-}" in
  start) [ $# -eq 2 ] || die "usage: cluster.sh start DIR"; start "$2" ;;
  stop) [ $# -eq 2 ] || die "usage: cluster.sh stop DIR"; stop "$2" ;;
  run)
    shift
    [ $# -ge 1 ] || die "usage: cluster.sh run CMD..."
    dir=$(mktemp -d /tmp/autooptim-slurm.XXXXXX)
    # The folder goes with the cluster unless the command failed (its logs are worth a look) or KEEP is set.
    trap 'rc=$?; stop "$dir"; if [ $rc -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$dir"; fi' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start "$dir" >/dev/null
    export SLURM_CONF="$dir/slurm.conf"
    set +e
    "$@"
    rc=$?
    set -e
    exit $rc
    ;;
  *) die "usage: cluster.sh start DIR | stop DIR | run CMD..." ;;
esac
