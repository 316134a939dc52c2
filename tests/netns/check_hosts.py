#!/usr/bin/env python3
"""The seed's two-host job in the namespace test bed (scripts/netns_cluster.sh: hosts 10.0.0.1 and
10.0.0.2 on a bridge of their own), started by hand as on two machines, and the faults of a real
network during training: a killed process, a frozen one (SIGSTOP), a black hole (packets dropped
with no reset) and a link taken down. Every process must end, non-zero, within 15 s of the fault
with a message naming the silent process, under the default heartbeat timeout (10 s).
Usage: check_hosts.py FAULT_TOOL CASE   (exits 77 where namespaces cannot be made)"""
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "..", "scripts", "netns_cluster.sh")
sys.path.insert(0, os.path.join(HERE, ".."))
from process_helpers import wait_all  # noqa: E402

ADDRESSES = "10.0.0.1:1234,10.0.0.2:2345"  # the seed's own
LIMIT_SECONDS = 15.0

# case: (fault_tool scenario, what the driver does to host 2 and when, patterns per process)
CASES = {
    "train": ("normal", None, [r"rank 0: trained", r"rank 1: trained"]),
    "killed": ("killed", None, [r"closed its connection|stopped answering", r"fault_at="]),
    "frozen": ("frozen", "continue", [r"keras: process 0 ends: process 1 stopped answering: its heartbeat", r"fault_at="]),
    "blackhole": ("train_long", "blackhole",
                  [r"keras: process 0 ends: process 1 stopped answering|did not answer within",
                   r"keras: process 1 ends: process 0 \(the coordinator\) stopped answering: the coordinator at "
                   r"10\.0\.0\.1:1234 did not answer"]),
    "link_down": ("train_long", "link_down",
                  [r"keras: process 0 ends: process 1 stopped answering|closed its connection|did not answer within",
                   r"keras: process 1 ends|caught|error"]),
}


# A test bed of this run's own (namespace names kerasnet<pid>-*): two runs at once (a clean
# clone's CI beside a working tree's tests) would otherwise tear down each other's hosts.
os.environ.setdefault("KERAS_NETNS_PREFIX", f"kerasnet{os.getpid() % 100000}")


def cluster(*arguments):
    return subprocess.run(["bash", CLUSTER, *arguments], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def start(tool, scenario, process_id):
    environment = dict(os.environ, KERAS_NUM_THREADS="1", KERAS_COLLECTIVE_TIMEOUT_SECONDS="60",
                       KERAS_DISTRIBUTION_JOB_ADDRESSES=ADDRESSES, KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                       KERAS_DISTRIBUTION_PROCESS_ID=str(process_id))
    return subprocess.Popen(["bash", CLUSTER, "exec", str(process_id + 1), tool, scenario], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main():
    tool, case = sys.argv[1:3]
    scenario, action, patterns = CASES[case]
    made = cluster("up", "2")
    if made.returncode == 77:
        print(made.stdout.strip())
        return 77
    if made.returncode != 0:
        print(f"FAIL: the test bed did not come up:\n{made.stdout}")
        return 1
    failures = []
    try:
        processes = [start(tool, scenario, 0), start(tool, scenario, 1)]
        fault_at = None
        zero_ended = None
        if action in ("blackhole", "link_down"):
            time.sleep(3)  # training has begun
            fault_at = time.monotonic()
            cluster(action, "2")
        elif action == "continue":
            # The frozen process cannot end before it runs again: wait for process 0, then continue it.
            try:
                processes[0].wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
            zero_ended = time.monotonic()
            processes[1].send_signal(signal.SIGCONT)
            # `bash exec` became the tool itself (exec), so the signal reached it.
        if action in ("blackhole", "link_down"):
            try:
                processes[0].wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
            cluster("restore", "2")  # let the cut-off process hear that the coordinator is gone
        results = wait_all(processes, 90)
        ended = time.monotonic()
        if results is None:
            print(f"FAIL: {case}: the processes still ran after 90 s (a hang)")
            return 1
        output = "".join(f"[process {i}] {line}\n" for i, (_, text) in enumerate(results) for line in text.splitlines())
        print(output)
        faults = [float(value) for value in re.findall(r"fault_at=([0-9.]+)", output)]
        if fault_at is None and faults:
            fault_at = min(faults)
        statuses = [status for status, _ in results]
        if case == "train":
            if any(statuses):
                failures.append(f"the job exited with statuses {statuses}")
        else:
            if not all(status != 0 for status in statuses):
                failures.append(f"a process exited with status 0 after the fault: {statuses}")
            if fault_at is None:
                failures.append("no fault time")
            else:
                # The frozen process ends once continued; process 0 is what must end in time.
                elapsed = (zero_ended if case == "frozen" else ended) - fault_at
                print(f"{case}: every process ended {elapsed:.2f} s after the fault (limit {LIMIT_SECONDS} s)")
                if elapsed >= LIMIT_SECONDS:
                    failures.append(f"the job ended {elapsed:.2f} s after the fault")
        for pattern in patterns:
            if not re.search(pattern, output):
                failures.append(f"the output lacks /{pattern}/")
    finally:
        cluster("down")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
