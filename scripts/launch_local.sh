#!/usr/bin/env bash
# Starts N processes of one program on this machine the way a job started by hand runs, without
# mpirun: each gets KERAS_DISTRIBUTION_JOB_ADDRESSES (distinct loopback addresses 127.0.0.1:p,
# 127.0.0.2:p+1, ... standing in for separate hosts), KERAS_DISTRIBUTION_NUM_PROCESSES and its
# KERAS_DISTRIBUTION_PROCESS_ID, and one KERAS_DISTRIBUTION_JOB_TOKEN (a fresh random one unless
# the caller set it), so no other program on the machine can join. Output lines get a
# "[process i]" prefix. When one process
# fails, the others are stopped and the helper exits with the first failure's status.
#   scripts/launch_local.sh N program [args...]
#   KERAS_LAUNCH_PORT=29500 scripts/launch_local.sh 2 ./fashion_mnist --distribution data_parallel
set -u
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ] || [ "$1" -gt 250 ]; then
  echo "usage: launch_local.sh N program [args...]   (N from 1 to 250)" >&2
  exit 2
fi
count=$1
shift
if [ -n "${KERAS_LAUNCH_PORT:-}" ]; then
  port=$KERAS_LAUNCH_PORT
else
  # Below the kernel's ephemeral range, so no outgoing connection can take it before the
  # coordinator binds it (scripts/pick_port.py says why).
  port=$(python3 "$(dirname "$0")/pick_port.py" "$count" 2>/dev/null || echo $((20000 + RANDOM % 10000)))
fi
# The job's token: 32 random bytes as hex, unless given.
if [ -z "${KERAS_DISTRIBUTION_JOB_TOKEN:-}" ]; then
  KERAS_DISTRIBUTION_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
fi
export KERAS_DISTRIBUTION_JOB_TOKEN
addresses=""
for ((i = 0; i < count; i++)); do
  addresses+="${addresses:+,}127.0.0.$((i + 1)):$((port + i))"
done
set -m  # each process in its own process group, so stopping one stops all it started
pids=()
for ((i = 0; i < count; i++)); do
  (
    KERAS_DISTRIBUTION_JOB_ADDRESSES=$addresses KERAS_DISTRIBUTION_NUM_PROCESSES=$count \
      KERAS_DISTRIBUTION_PROCESS_ID=$i "$@" 2>&1 | sed -u "s/^/[process $i] /"
    exit "${PIPESTATUS[0]}"
  ) &
  pids+=($!)
done
status=0
for ((left = count; left > 0; left--)); do
  wait -n -p finished
  code=$?
  if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$code
    for ((i = 0; i < count; i++)); do
      [ "${pids[$i]}" = "$finished" ] && echo "[launch] process $i exited with status $code; stopping the others" >&2
    done
    for pid in "${pids[@]}"; do
      [ "$pid" != "$finished" ] && kill -TERM -- "-$pid" 2>/dev/null
    done
  fi
done
exit "$status"
