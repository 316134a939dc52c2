"""BackupAndRestore against real crashes: a run killed with SIGKILL mid-epoch, started again the
same way, must end with the weights of an uninterrupted run (within 1e-6).

usage: check_resume.py BACKUP_TOOL PROCESSES DISTRIBUTION SAVE_FREQ KILL_AT [MPIEXEC]

Runs the tool three times (PROCESSES > 1: under MPIEXEC): uninterrupted; killed at KILL_AT
(EPOCH:BATCH, the last process kills itself); and again without the kill. Checks that the
killed run died by the signal, left a backup, that the third run says it restored, and compares
its weights file with the first's tensor by tensor.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from process_helpers import wait_all  # noqa: E402

TOLERANCE = 1e-6
SECONDS = 120


def read_safetensors(path):
    """{name: [float]} of a float32/float64 safetensors file, without numpy."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
        data = handle.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        code = {"F32": "f", "F64": "d"}[entry["dtype"]]
        tensors[name] = struct.unpack(f"<{(end - begin) // struct.calcsize(code)}{code}", data[begin:end])
    return tensors


def run(command):
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    results = wait_all([process], SECONDS)
    if results is None:
        sys.exit(f"FAIL: did not finish within {SECONDS} s: {' '.join(command)}")
    return results[0]


def main():
    if len(sys.argv) not in (6, 7):
        sys.exit(__doc__)
    tool, processes, distribution, save_freq, kill_at = sys.argv[1:6]
    mpiexec = sys.argv[6] if len(sys.argv) == 7 else None
    processes = int(processes)
    if processes > 1 and not mpiexec:
        sys.exit("PROCESSES > 1 needs MPIEXEC")
    launcher = ([mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(processes),
                 "-x", "KERAS_NUM_THREADS=1"] if processes > 1 else [])
    with tempfile.TemporaryDirectory(prefix="keras_resume_") as scratch:
        def command(backup, weights, *extra):
            return launcher + [tool, "--distribution", distribution, "--save-freq", save_freq,
                               "--backup-dir", os.path.join(scratch, backup),
                               "--weights-out", os.path.join(scratch, weights), *extra]

        status, output = run(command("reference_backup", "reference.safetensors"))
        if status != 0 or "not restored" not in output:
            sys.exit(f"FAIL: the uninterrupted run failed ({status}):\n{output}")
        reference_output = output

        status, output = run(command("backup", "unused.safetensors", "--kill-at", kill_at))
        print(output)
        if status == 0 or "SIGKILL after batch" not in output:
            sys.exit(f"FAIL: the run to be killed was not killed (status {status})")
        if os.path.exists(os.path.join(scratch, "unused.safetensors")):
            sys.exit("FAIL: the killed run got to its end")
        if not os.path.exists(os.path.join(scratch, "backup", "latest.safetensors")):
            sys.exit("FAIL: the killed run left no backup")

        status, output = run(command("backup", "resumed.safetensors"))
        print(output)
        if status != 0 or "restored epoch=" not in output:
            sys.exit(f"FAIL: the restarted run did not resume ({status})")
        if os.path.exists(os.path.join(scratch, "backup", "latest.safetensors")):
            sys.exit("FAIL: the finished run did not delete its backup")

        reference = read_safetensors(os.path.join(scratch, "reference.safetensors"))
        resumed = read_safetensors(os.path.join(scratch, "resumed.safetensors"))
        if sorted(reference) != sorted(resumed):
            sys.exit(f"FAIL: different weights: {sorted(reference)} vs {sorted(resumed)}")
        worst = 0.0
        for name, values in reference.items():
            if len(values) != len(resumed[name]):
                sys.exit(f"FAIL: {name} has {len(resumed[name])} values, expected {len(values)}")
            for a, b in zip(values, resumed[name]):
                worst = max(worst, abs(a - b))
        final = [line for line in reference_output.splitlines() if line.startswith("final loss")]
        print(f"uninterrupted {final}; largest weight difference after resuming: {worst:.3g}")
        if worst > TOLERANCE:
            sys.exit(f"FAIL: resumed weights differ from the uninterrupted run's by {worst:.3g}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
