#!/usr/bin/env bash
# A real single-node Slurm on this machine, for tests: slurmctld + slurmd + munge from Debian, no systemd.
# Usage: local_slurm.sh up DIR    writes DIR/slurm.conf, starts munged, slurmctld and slurmd, waits for the node
#                                  to be idle, and prints `export SLURM_CONF=DIR/slurm.conf` (clients need it: without
#                                  it they look the controller up by DNS)
#        local_slurm.sh down DIR  stops what DIR's pid files name (never by process name), so it is safe after a
#                                  failed or partial `up`, and twice
# Everything lives under DIR: config, state, spool, logs, pid files and munge's own socket and key. `up` on a
# DIR whose daemons run already stops them first, so it is idempotent. Runs as root (SlurmUser=root).
set -euo pipefail
ACTION=${1:?usage: local_slurm.sh up|down DIR}
DIR=${2:?usage: local_slurm.sh up|down DIR}
UP_TIMEOUT_S=20 # how long `up` waits for the node to answer before it gives up

DAEMONS=(slurmd slurmctld munged) # stopped in this order: the node first, munge last (the others use it)

# stop_daemon NAME: ends the process DIR/NAME.pid names, TERM then KILL after 5 s; absent or stale is fine (a
# stale file whose pid now belongs to another program is left alone: the pid's command must be NAME).
stop_daemon() {
  local pidfile="$DIR/$1.pid" pid
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# cancel_jobs: while the controller lives, cancels every job and waits (10 s at most) for them to end, so that no
# job step (slurmstepd and its ranks, which outlive slurmd) is left behind.
cancel_jobs() {
  [ -s "$DIR/slurmctld.pid" ] && [ "$(cat "/proc/$(cat "$DIR/slurmctld.pid")/comm" 2>/dev/null)" = slurmctld ] || return 0
  export SLURM_CONF="$DIR/slurm.conf"
  timeout 5 scancel --full --user="$(id -un)" 2>/dev/null || true
  for _ in $(seq 1 50); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
}

down() {
  cancel_jobs
  for d in "${DAEMONS[@]}"; do stop_daemon "$d"; done
}

write_conf() {
  local host mem_mb
  host=$(hostname -s)
  mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 - 512 ))
  cat >"$DIR/slurm.conf" <<CONF
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=batch_sched_delay=0
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
KillWait=$KILL_WAIT_S
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
}

up() {
  down
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/munge"
  chmod 0755 "$DIR/munge"
  # A key of its own (every client here talks to this munged through its socket): the system's key is neither
  # needed nor touched. munged wants it owned by its user with mode 0400.
  (umask 077 && head -c 1024 /dev/urandom >"$DIR/munge/munge.key")
  chmod 0400 "$DIR/munge/munge.key"
  munged --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed" --force
  write_conf
  export SLURM_CONF="$DIR/slurm.conf"
  slurmctld -c -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  local deadline=$((SECONDS + UP_TIMEOUT_S))
  until sinfo -h -o %t 2>/dev/null | grep -q '^idle'; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "local_slurm.sh: the node is not idle after ${UP_TIMEOUT_S}s (logs in $DIR)" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "export SLURM_CONF=$SLURM_CONF"
}

# Ports of our own, so this Slurm does not meet another one on the machine (override by the environment).
SLURMCTLD_PORT=${SLURMCTLD_PORT:-16817}
SLURMD_PORT=${SLURMD_PORT:-16818}
KILL_WAIT_S=${KILL_WAIT_S:-10} # SIGTERM to SIGKILL when a job is cancelled or requeued: the time to save

case $ACTION in
  up) mkdir -p "$DIR" && DIR=$(cd "$DIR" && pwd) && up ;;
  down) if [ -d "$DIR" ]; then DIR=$(cd "$DIR" && pwd) && down; fi ;;
  *) echo "usage: local_slurm.sh up|down DIR" >&2; exit 2 ;;
esac
