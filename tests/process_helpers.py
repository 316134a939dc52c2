"""What the multi-process test drivers share: waiting for a set of processes with one deadline,
killing them all if it passes (a hang must end the test, not the CI job)."""
import subprocess
import time


def wait_all(processes, seconds):
    """[(status, output)] per process, or None when they still ran after `seconds` (all killed)."""
    deadline = time.monotonic() + seconds
    results = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            for other in processes:
                other.communicate()
            return None
        results.append((process.returncode, output))
    return results
