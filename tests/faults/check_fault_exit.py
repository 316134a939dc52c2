#!/usr/bin/env python3
"""Runs fault_tool under `mpirun -np 2` with one fault and checks that the whole job ends
within 10 s of the fault (the moment the tool prints as fault_at=...), with the status and
messages expected. Usage: check_fault_exit.py MPIRUN TOOL SCENARIO"""
import os
import re
import subprocess
import sys
import time

LIMIT_SECONDS = 10.0

# scenario: (collective timeout in s, exit status must be zero, patterns that must appear)
EXPECTED = {
    "normal": (60, True, [r"rank 0: trained", r"rank 1: trained"]),
    "killed": (60, False, [r"fault_at=", r"(signal 9|Killed)"]),
    "caught_error": (60, False, [r"caught in main: an error of the user's own code on rank 0",
                                 r"rank 0 issued finalize|ranks? 0 issued finalize",
                                 r"ends the whole job \(MPI_Abort\)"]),
    "stall": (3, False, [r"did not complete within 3 s",
                         r"poisoned, refused in 0\.0\d+ s: barrier over world refused",
                         r"ends the whole job \(MPI_Abort\)"]),
    "early_return": (60, False, [r"rank 0 issued finalize",
                                 r"ends the whole job \(MPI_Abort\)"]),
    "blocked": (1, False, [r"all_reduce over world has blocked for more than 11\.0 s"]),
    "mismatch": (60, False, [r"rank 0 issued all_reduce \(sum\) of 4 float64 elements; "
                             r"rank 1 issued all_reduce \(max\) of 8 float32 elements",
                             r"ends the whole job \(MPI_Abort\)"]),
}


def main():
    mpirun, tool, scenario = sys.argv[1:4]
    timeout, must_succeed, patterns = EXPECTED[scenario]
    environment = dict(os.environ, KERAS_NUM_THREADS="1",
                       KERAS_COLLECTIVE_TIMEOUT_SECONDS=str(timeout))
    command = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", tool, scenario]
    started = time.monotonic()
    try:
        result = subprocess.run(command, env=environment, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=120)
    except subprocess.TimeoutExpired as expired:
        print(expired.stdout or "")
        print(f"FAIL: the job of scenario {scenario} still ran after 120 s (a hang)")
        return 1
    ended = time.monotonic()
    output = result.stdout
    print(output)
    failures = []
    faults = [float(value) for value in re.findall(r"fault_at=([0-9.]+)", output)]
    if scenario != "normal":
        if not faults:
            failures.append("the tool printed no fault_at= line")
        else:
            elapsed = ended - min(faults)
            print(f"{scenario}: every process exited {elapsed:.2f} s after the fault "
                  f"(limit {LIMIT_SECONDS} s; whole job {ended - started:.2f} s)")
            if elapsed >= LIMIT_SECONDS:
                failures.append(f"the job ended {elapsed:.2f} s after the fault")
    if must_succeed != (result.returncode == 0):
        failures.append(f"mpirun exited with status {result.returncode}, expected "
                        f"{'0' if must_succeed else 'non-zero'}")
    for pattern in patterns:
        if not re.search(pattern, output):
            failures.append(f"the output lacks /{pattern}/")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
