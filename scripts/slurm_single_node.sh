#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for as long as one command runs: its own munge key
# and socket, slurmctld and slurmd on loopback ports, everything under a temporary folder that is
# removed afterwards (nothing in /etc is touched). Runs COMMAND (e.g. `srun -n 2 ./program`)
# with SLURM_CONF pointing at the cluster, and exits with its status. Needs root and Debian's
# slurm-wlm and munge; exits 77 (CTest's skip code, see tests/CMakeLists.txt) where they are missing.
#   bash scripts/slurm_single_node.sh srun -n 2 ./build/ci/examples/fashion_mnist/fashion_mnist ...
set -euo pipefail
if [ "$(id -u)" != 0 ] || ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
  echo "skipped: a one-node Slurm needs root and Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/keras-slurm.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2> /dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT

# Two free ports below the ephemeral range (scripts/pick_port.py says why).
read -r ctld_port slurmd_port < <(python3 -c "
import sys; sys.path.insert(0, '$here'); from pick_port import pick_port; p = pick_port(2); print(p, p + 1)")

mkdir -p "$dir/state" "$dir/spool"
mungekey --create --keyfile="$dir/munge.key" --force > /dev/null 2>&1 ||
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge.key"
munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"
for _ in $(seq 50); do [ -s "$dir/munged.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$dir/munged.pid")")

node=$(hostname)
# The node as slurmd sees it (CPUs, sockets, memory): slurmd refuses a node configured larger.
hardware=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')
cat > "$dir/slurm.conf" << EOF
ClusterName=kerascpp
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$dir/slurmd.out" 2>&1 &
pids+=($!)
ready=0
for _ in $(seq 100); do
  if sinfo -h -o %T 2> /dev/null | grep -qE '^(idle|mixed)'; then ready=1; break; fi
  sleep 0.2
done
if [ "$ready" != 1 ]; then
  echo "the one-node Slurm did not come up within 20 s; its logs:"
  tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/*.out 2> /dev/null || true
  exit 1
fi
status=0
"$@" || status=$?
exit "$status"
