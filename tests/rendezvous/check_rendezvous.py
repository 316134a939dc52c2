#!/usr/bin/env python3
"""Starts initialize_tool processes by hand (no mpirun), as a user would in separate shells, and
checks what each prints and how fast the job ends: the seed's own example with explicit
arguments and with the KERAS_DISTRIBUTION_* variables (address list, or the coordinator's
address alone), the variables torchrun and Slurm set, and each rendezvous error.
Usage: check_rendezvous.py TOOL CASE"""
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pick_port import pick_port  # noqa: E402  (below the ephemeral range; it says why)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from process_helpers import wait_all  # noqa: E402


def start(tool, arguments=(), environment=None):
    env = dict(os.environ, KERAS_NUM_THREADS="1", **(environment or {}))
    return subprocess.Popen([tool, *arguments], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def free_port_above_ephemeral():
    """A port in [61440, 65535] nothing listens on now (where Slurm jobs' coordinators go)."""
    for candidate in range(61440 + os.getpid() % 4000, 65536):
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", candidate))
            return candidate
        except OSError:
            continue
        finally:
            probe.close()
    raise RuntimeError("no free port in [61440, 65535]")


def variables(addresses, processes, process_id):
    return {"KERAS_DISTRIBUTION_JOB_ADDRESSES": addresses,
            "KERAS_DISTRIBUTION_NUM_PROCESSES": str(processes),
            "KERAS_DISTRIBUTION_PROCESS_ID": str(process_id)}


def main():
    tool, case = sys.argv[1:3]
    port = pick_port(2)
    listing = f"127.0.0.1:{port},127.0.0.2:{port + 1}"
    # case: (processes, seconds allowed, [(status zero?, pattern) per process])
    if case == "explicit_arguments":
        processes = [start(tool, ["--job-addresses", listing, "--num-processes", "2", "--process-id", str(i)])
                     for i in range(2)]
        expected = [(True, r"processes=2 id=0 seeds agree"), (True, r"processes=2 id=1 seeds agree")]
    elif case == "environment_coordinator_only":
        processes = [start(tool, environment=variables(f"127.0.0.1:{port}", 2, i)) for i in range(2)]
        expected = [(True, r"processes=2 id=0 seeds agree"), (True, r"processes=2 id=1 seeds agree")]
    elif case == "duplicate_process_id":
        processes = [start(tool, environment=variables(listing, 2, 0)) for _ in range(2)]
        expected = [(False, r"process_id 0 was claimed by two processes|another process refused the job")] * 2
    elif case == "num_processes_differ":
        processes = [start(tool, environment=variables(listing, 2, 0)),
                     start(tool, environment=variables(f"127.0.0.1:{port}", 3, 1))]
        expected = [(False, r"started with num_processes=\d but process \d with num_processes=\d")] * 2
    elif case == "addresses_differ":
        other = f"127.0.0.1:{port},127.0.0.3:{port + 1}"
        processes = [start(tool, environment=variables(listing, 2, 0)),
                     start(tool, environment=variables(other, 2, 1))]
        expected = [(False, r"was started with job_addresses=\S+ but process \d with job_addresses=\S+; every process "
                            r"must be given the same list")] * 2
    elif case == "missing_process":
        environment = dict(variables(listing, 2, 0), KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS="2")
        processes = [start(tool, environment=environment)]
        expected = [(False, rf"processes 1 of 2 did not join the job at the coordinator 127\.0\.0\.1:{port} within 2 s")]
    elif case == "coordinator_port_in_use":
        holder = socket.socket()
        holder.bind(("127.0.0.1", port))
        holder.listen()
        processes = [start(tool, environment=variables(listing, 2, 0))]
        expected = [(False, rf"the coordinator cannot listen on 127\.0\.0\.1:{port}: Address already in use")]
    elif case == "torchrun_variables":
        # As torchrun and Kubernetes' training operators start each process.
        processes = [start(tool, environment={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                              "WORLD_SIZE": "2", "RANK": str(i)}) for i in range(2)]
        expected = [(True, r"processes=2 id=0 seeds agree"), (True, r"processes=2 id=1 seeds agree")]
    elif case == "slurm_variables":
        # As srun -n 2 starts each process: the coordinator is the step's first node, on the
        # port Slurm's job id gives (61440 + id % 4096): a job id whose port is free here.
        slurm_port = free_port_above_ephemeral()
        processes = [start(tool, environment={"SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_NTASKS": "2",
                                              "SLURM_PROCID": str(i), "SLURM_JOB_ID": str(4096 * 7 + slurm_port - 61440)})
                     for i in range(2)]
        expected = [(True, r"processes=2 id=0 seeds agree"), (True, r"processes=2 id=1 seeds agree")]
    elif case == "keras_variables_win_over_launchers":
        launcher = {"MASTER_ADDR": "no-such-host.invalid", "MASTER_PORT": "1", "WORLD_SIZE": "5", "RANK": "4"}
        processes = [start(tool, environment=dict(launcher, **variables(f"127.0.0.1:{port}", 2, i))) for i in range(2)]
        expected = [(True, r"processes=2 id=0 seeds agree"), (True, r"processes=2 id=1 seeds agree")]
    elif case == "torchrun_variables_in_part":
        processes = [start(tool, environment={"MASTER_ADDR": "127.0.0.1", "RANK": "0"})]
        expected = [(False, r"torchrun's variables are set only in part: MASTER_PORT, WORLD_SIZE missing")]
    elif case == "wrong_token_named_at_timeout":
        # Process 1 has another token: refused on its side at once; the coordinator logs the
        # refusal when it happens and names it when its join deadline passes.
        environment = dict(variables(listing, 2, 0), KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS="3",
                           KERAS_DISTRIBUTION_JOB_TOKEN="the job's token")
        processes = [start(tool, environment=environment)]
        time.sleep(0.5)
        processes.append(start(tool, environment=dict(variables(listing, 2, 1),
                                                      KERAS_DISTRIBUTION_JOB_TOKEN="another token")))
        expected = [(False, r"(?s)keras: the coordinator at 127\.0\.0\.1:\d+ refused a connection from 127\.0\.0\.\d:\d+ "
                            r"\(wrong job token.*did not join the job .* within 3 s .*meanwhile the coordinator refused "
                            r"1 connection: from 127\.0\.0\.\d:\d+ \(wrong job token"),
                    (False, r"refused this process's job token \(wrong job token")]
    elif case == "unresolvable_host":
        processes = [start(tool, environment=variables("no-such-host.invalid:1234", 2, 0))]
        expected = [(False, r"the host 'no-such-host\.invalid' does not resolve")]
    else:
        print(f"unknown case {case}")
        return 2
    started = time.monotonic()
    results = wait_all(processes, 30)
    elapsed = time.monotonic() - started
    if results is None:
        print(f"FAIL: {case}: the processes still ran after 30 s (a hang)")
        return 1
    failures = []
    for index, ((status, output), (must_succeed, pattern)) in enumerate(zip(results, expected)):
        print(f"--- process {index} (status {status}):\n{output}")
        if must_succeed != (status == 0):
            failures.append(f"process {index} exited with status {status}")
        if not re.search(pattern, output):
            failures.append(f"process {index} lacks /{pattern}/")
    print(f"{case}: the job ended after {elapsed:.2f} s")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
