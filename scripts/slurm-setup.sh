#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (root, Debian's slurm-wlm + munge), for the
# tests marked `slurm` (tests/test_slurm_executor.py) and for trying SlurmExecutor.
#
#   bash scripts/slurm-setup.sh          # from nothing: ~1-2 min with the apt install,
#                                        # ~5 s when the packages are there, <1 s when up
#
# Idempotent: installs what is missing, (re)writes /etc/slurm/slurm.conf only when its
# content changes, starts munged/slurmctld/slurmd only when they are not running, and
# returns once `sinfo` shows the node `localhost` idle.  No systemd needed (CI
# containers have none): the daemons are started directly.
#
# Accounting is off (accounting_storage/none): finished jobs stay visible to
# `scontrol show job` for MinJobAge seconds (1 h here), which is what the executor
# reads for a job's final state; the worker's own exit-code file is the primary record.
set -euo pipefail

LOG_DIR=/var/log/slurm
CONF=/etc/slurm/slurm.conf
NODE=localhost

log() { echo "slurm-setup: $*"; }

node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -1 || true; }

is_up() {
  case "$(node_state)" in
    idle | mixed | allocated | completing) return 0 ;;
    *) return 1 ;;
  esac
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return
  fi
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq -o DPkg::Lock::Timeout=300 slurm-wlm munge >/dev/null
}

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating the munge key"
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile=/etc/munge/munge.key --force
    else
      create-munge-key -f
    fi
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    return
  fi
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --force
  for _ in $(seq 1 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "slurm-setup: munged does not answer; see /var/log/munge/munged.log" >&2
  exit 1
}

real_memory_mb() {
  # Total memory minus a margin (10%, at least 512 MB) so slurmd never finds less
  # memory than configured (which would drain the node).
  local total
  total=$(free -m | awk '/^Mem:/ {print $2}')
  local margin=$((total / 10))
  [ "$margin" -lt 512 ] && margin=512
  echo $((total - margin))
}

render_conf() {
  cat <<EOF
# Written by scripts/slurm-setup.sh (turbo-campaign): a one-node test cluster.
ClusterName=turbo-campaign
SlurmctldHost=${NODE}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=${LOG_DIR}/slurmctld.log
SlurmdLogFile=${LOG_DIR}/slurmd.log
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$(real_memory_mb) State=UNKNOWN
PartitionName=debug Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
EOF
}

write_conf() {
  # Prints "changed" when the configuration file was (re)written.
  mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOG_DIR"
  local new
  new=$(render_conf)
  if [ -f "$CONF" ] && [ "$(cat "$CONF")" = "$new" ]; then
    return
  fi
  printf '%s\n' "$new" >"$CONF.tmp"
  mv "$CONF.tmp" "$CONF"
  echo changed
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_daemon() {
  if running "$1"; then
    kill "$(cat "$1")" 2>/dev/null || true
    for _ in $(seq 1 50); do running "$1" || return 0; sleep 0.1; done
  fi
}

start_slurm() {
  local changed=$1
  if [ "$changed" = changed ]; then
    stop_daemon /run/slurmd.pid
    stop_daemon /run/slurmctld.pid
  fi
  if ! running /run/slurmctld.pid; then
    log "starting slurmctld"
    /usr/sbin/slurmctld
  fi
  if ! running /run/slurmd.pid; then
    log "starting slurmd"
    /usr/sbin/slurmd -N "$NODE"
  fi
}

wait_idle() {
  local state=""
  for i in $(seq 1 300); do
    is_up && { log "node $NODE is $(node_state) ($(sinfo --version))"; return; }
    state=$(node_state)
    # A node left down/drained by an earlier run (e.g. a restart): resume it.
    case "$state" in
      down* | drain* | fail*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    [ "$i" -eq 1 ] && log "waiting for node $NODE to become idle"
    sleep 0.1
  done
  echo "slurm-setup: node $NODE is not idle after 30 s (state: ${state:-none})" >&2
  echo "--- ${LOG_DIR}/slurmctld.log" >&2
  tail -20 "$LOG_DIR/slurmctld.log" >&2 || true
  echo "--- ${LOG_DIR}/slurmd.log" >&2
  tail -20 "$LOG_DIR/slurmd.log" >&2 || true
  exit 1
}

main() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "slurm-setup: run as root (it installs packages and starts daemons)" >&2
    exit 1
  fi
  install_packages
  local changed
  changed=$(write_conf)
  if [ "$changed" != changed ] && is_up; then
    log "already up: node $NODE is $(node_state)"
    return
  fi
  start_munge
  start_slurm "$changed"
  wait_idle
}

main "$@"
