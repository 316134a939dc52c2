#!/usr/bin/env python3
"""Runs fault_tool on 2 processes with one fault and checks that the whole job ends within 10 s
of the fault (the moment the tool prints as fault_at=...), with the status and messages
expected. The processes run under `mpirun -np 2` (backend mpi) or are started by hand, each
with the three KERAS_DISTRIBUTION_* variables on loopback addresses (backend gloo); nothing
kills the survivors for them, so the time measured is our own detection.
Usage: check_fault_exit.py MPIRUN TOOL SCENARIO [mpi|gloo]"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pick_port import pick_port  # noqa: E402  (below the ephemeral range; it says why)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from process_helpers import wait_all  # noqa: E402

LIMIT_SECONDS = 10.0

# scenario: (collective timeout in s, exit status must be zero, patterns that must appear)
EXPECTED = {
    "normal": (60, True, [r"rank 0: trained", r"rank 1: trained"]),
    "killed": (60, False, [r"fault_at=", r"(signal 9|Killed)"]),
    "caught_error": (60, False, [r"caught in main: an error of the user's own code on rank 0",
                                 r"rank 0 issued finalize|ranks? 0 issued finalize",
                                 r"ends the whole job \(MPI_Abort\)"]),
    "stall": (3, False, [r"did not complete within 3 s on rank 0: (rank\(s\) 1 have not joined it|"
                         r"another rank has not joined it)",
                         r"poisoned, refused in 0\.0\d+ s: barrier over world refused",
                         r"ends the whole job \(MPI_Abort\)"]),
    "early_return": (60, False, [r"rank 0 issued finalize",
                                 r"ends the whole job \(MPI_Abort\)"]),
    "blocked": (1, False, [r"all_reduce over world has blocked for more than 11\.0 s"]),
    "mismatch": (60, False, [r"rank 0 issued all_reduce \(sum\) of 4 float64 elements; "
                             r"rank 1 issued all_reduce \(max\) of 8 float32 elements",
                             r"ends the whole job \(MPI_Abort\)"]),
    "mismatch_small_large": (60, False, [r"rank 0 issued all_reduce \(sum\) of 4 float32 elements; "
                                         r"rank 1 issued all_reduce \(sum\) of 262144 float32 elements",
                                         r"rank 0: caught in main: all_reduce over world: the ranks disagree",
                                         r"rank 1: caught in main: all_reduce over world: the ranks disagree"]),
    "mismatch_barrier_broadcast": (60, False, [r"rank 0 issued barrier; rank 1 issued broadcast from "
                                               r"rank 0 of 3 int64 elements",
                                               r"rank 0: caught in main: barrier over world: the ranks disagree",
                                               r"rank 1: caught in main: broadcast over world: the ranks disagree"]),
    # A frozen process (SIGSTOP) under mpirun: MPI says nothing about it, and the collective
    # timeout (60 s here, 300 s by default) is not what ends the job: process 0's heartbeat
    # store (distribution/transports/mpi/mpi_heartbeats.h) finds its heartbeat still; a frozen
    # process 0 leaves the others' requests unanswered. mpirun then ends the frozen one.
    "frozen": (60, False, [r"keras: process 0 ends: process 1 stopped answering: its heartbeat",
                           r"HEARTBEAT_TIMEOUT_SECONDS=3"]),
    "frozen_coordinator": (60, False, [r"keras: process 1 ends: process 0 \(the coordinator\) stopped "
                                       r"answering: the coordinator at \S+ did not answer a request"]),
    # A step longer than the heartbeat timeout is computing, not silent: the job trains.
    "slow_step": (60, True, [r"rank 1: computing for 8 s", r"rank 0: trained", r"rank 1: trained"]),
}

# The same faults on Gloo: the messages that differ are how the job ends (no MPI_Abort: a
# process exits and its peers see its connections close) and how a timeout reads.
EXPECTED_GLOO = {
    "normal": EXPECTED["normal"],
    "killed": (60, False, [r"fault_at=", r"closed its connection"]),
    "caught_error": (60, False, [r"caught in main: an error of the user's own code on rank 0",
                                 r"rank 0 issued finalize|closed its connection"]),
    "stall": (3, False, [r"did not answer within 3000 ms",
                         r"poisoned, refused in 0\.0\d+ s: barrier over world refused"]),
    "early_return": (60, False, [r"rank 0 issued finalize|closed its connection"]),
    "mismatch": (60, False, [r"rank 0 issued all_reduce \(sum\) of 4 float64 elements; "
                             r"rank 1 issued all_reduce \(max\) of 8 float32 elements"]),
    # Two processes' all_reduce sends its values right behind its signature: a peer whose values
    # are larger than this rank's must still be told, not crash Gloo's receiving side.
    "mismatch_small_large": EXPECTED["mismatch_small_large"],
    # A frozen process (SIGSTOP): process 0 finds its heartbeat still, the job fails naming it;
    # a frozen coordinator: the others' requests to its store go unanswered. The collective
    # timeout (60 s) is not what ends them. The driver continues the frozen process afterwards,
    # and it ends too.
    "frozen": (60, False, [r"\[process 0\] keras: process 0 ends: process 1 stopped answering: its heartbeat",
                           r"HEARTBEAT_TIMEOUT_SECONDS=3"]),
    "frozen_coordinator": (60, False, [r"\[process 1\] keras: process 1 ends: process 0 \(the coordinator\) stopped "
                                       r"answering: the coordinator at \S+ did not answer a request"]),
    # A step longer than the heartbeat timeout is computing, not silent: the job trains.
    "slow_step": (60, True, [r"rank 1: computing for 8 s", r"rank 0: trained", r"rank 1: trained"]),
}
HEARTBEAT_SECONDS = "3"
FROZEN = {"frozen": 1, "frozen_coordinator": 0}


def run_by_hand(tool, scenario, environment):
    """Starts the 2 processes as a user would in two shells; returns (status, output)."""
    port = pick_port(2)
    addresses = f"127.0.0.1:{port},127.0.0.2:{port + 1}"
    processes = []
    for process_id in range(2):
        process_environment = dict(environment, KERAS_DISTRIBUTION_JOB_ADDRESSES=addresses,
                                   KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                                   KERAS_DISTRIBUTION_PROCESS_ID=str(process_id))
        processes.append(subprocess.Popen([tool, scenario], env=process_environment,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    if scenario in FROZEN:
        # The one that froze cannot end until it runs again: wait for the other, then continue it.
        frozen = processes[FROZEN[scenario]]
        other = processes[1 - FROZEN[scenario]]
        try:
            other.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        frozen.send_signal(signal.SIGCONT)
    results = wait_all(processes, 120)
    if results is None:
        raise subprocess.TimeoutExpired([tool, scenario], 120)
    statuses = [status for status, _ in results]
    outputs = [output for _, output in results]
    status = next((code for code in statuses if code != 0), 0)
    if status < 0:
        status = 128 - status
    text = "".join(f"[process {i}] {line}\n" for i, output in enumerate(outputs) for line in output.splitlines())
    if any(code == -9 for code in statuses):
        text += "a process was Killed (signal 9)\n"
    return status, text


def main():
    mpirun, tool, scenario = sys.argv[1:4]
    backend = sys.argv[4] if len(sys.argv) > 4 else "mpi"
    timeout, must_succeed, patterns = (EXPECTED_GLOO if backend == "gloo" else EXPECTED)[scenario]
    environment = dict(os.environ, KERAS_NUM_THREADS="1", KERAS_COLLECTIVE_TIMEOUT_SECONDS=str(timeout),
                       KERAS_DISTRIBUTION_HEARTBEAT_TIMEOUT_SECONDS=HEARTBEAT_SECONDS)
    command = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", tool, scenario]
    started = time.monotonic()
    try:
        if backend == "gloo":
            status, output = run_by_hand(tool, scenario, environment)
        else:
            result = subprocess.run(command, env=environment, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, timeout=120)
            status, output = result.returncode, result.stdout
    except subprocess.TimeoutExpired as expired:
        print(getattr(expired, "stdout", "") or "")
        print(f"FAIL: the job of scenario {scenario} still ran after 120 s (a hang)")
        return 1
    ended = time.monotonic()
    print(output)
    failures = []
    faults = [float(value) for value in re.findall(r"fault_at=([0-9.]+)", output)]
    if not must_succeed:  # a job that must train has no fault to time
        if not faults:
            failures.append("the tool printed no fault_at= line")
        else:
            elapsed = ended - min(faults)
            print(f"{scenario}: every process exited {elapsed:.2f} s after the fault "
                  f"(limit {LIMIT_SECONDS} s; whole job {ended - started:.2f} s)")
            if elapsed >= LIMIT_SECONDS:
                failures.append(f"the job ended {elapsed:.2f} s after the fault")
    if must_succeed != (status == 0):
        failures.append(f"the job exited with status {status}, expected "
                        f"{'0' if must_succeed else 'non-zero'}")
    for pattern in patterns:
        if not re.search(pattern, output):
            failures.append(f"the output lacks /{pattern}/")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
