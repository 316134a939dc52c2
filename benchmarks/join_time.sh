#!/usr/bin/env bash
# How long a job started by hand takes to start, by its size: N processes on this machine
# (scripts/launch_local.sh: distinct loopback addresses standing in for hosts) each run
# initialize() (the rendezvous, the Gloo full mesh, the heartbeat monitor), one all-reduce
# (the seed check) and finalize(). Prints, for each N, the wall time from the first start to
# the last exit, and the same for a program that only starts and exits (the floor: process
# creation and loading on this machine's cores).
#   benchmarks/join_time.sh BUILD_DIR [N ...]      (default N: 8 32 128 250)
set -u
build=${1:?usage: join_time.sh BUILD_DIR [N ...]}
shift
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(8 32 128 250)
here=$(cd "$(dirname "$0")" && pwd)
tool="$build/tests/initialize_tool"
[ -x "$tool" ] || { echo "no $tool: build the tests first" >&2; exit 2; }
# Enough descriptors for 250 processes' full mesh (each holds one socket per peer and pair).
ulimit -n 65536 2>/dev/null || true
printf "%10s %14s %14s %8s\n" processes "job (s)" "start only (s)" status
for n in "${sizes[@]}"; do
  started=$(date +%s.%N)
  KERAS_NUM_THREADS=1 KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS=600 \
    "$here/../scripts/launch_local.sh" "$n" "$tool" > "/tmp/join_time_$n.log" 2>&1
  status=$?
  ended=$(date +%s.%N)
  floor_started=$(date +%s.%N)
  KERAS_NUM_THREADS=1 "$here/../scripts/launch_local.sh" "$n" "$tool" --start-only 1 > /dev/null 2>&1
  floor_ended=$(date +%s.%N)
  printf "%10d %14.2f %14.2f %8d\n" "$n" "$(echo "$ended - $started" | bc)" \
    "$(echo "$floor_ended - $floor_started" | bc)" "$status"
done
