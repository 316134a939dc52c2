"""Progress output fits where it goes (training/progress_output.h), checked on real terminals:

  terminal         the program on a pseudo-terminal: a bar redrawn in place (escape codes)
  pipe             its output piped to a file: one line per epoch, no escape codes
  mpirun_pipe      under mpirun with mpirun's output piped, although every rank sees a
                   pseudo-terminal: no escape codes
  mpirun_terminal  mpirun itself on a pseudo-terminal: the bar
  flag_lines       KERAS_PROGRESS=lines on a terminal: no escape codes
  flag_bar         KERAS_PROGRESS=bar under mpirun piped: the bar
  explicit_bar_pipe  verbose=1 asked for explicitly, output piped: finished lines only

usage: check_progress.py PROGRESS_TOOL MPIEXEC CASE
"""
import os
import pty
import select
import subprocess
import sys

ESCAPE = "\x1b[K"
SECONDS = 120


def run_on_terminal(command, environment):
    """Runs `command` with a pseudo-terminal as stdout and stderr; returns (status, output)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                               env=environment, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], SECONDS)
        if not ready:
            process.kill()
            sys.exit(f"FAIL: no output for {SECONDS} s from {command}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return process.wait(timeout=SECONDS), b"".join(chunks).decode("utf-8", "replace")


def run_piped(command, environment):
    result = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=environment, timeout=SECONDS)
    return result.returncode, result.stdout.decode("utf-8", "replace")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tool, mpiexec, case = sys.argv[1:]
    mpirun = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", "1"]
    environment = dict(os.environ)
    environment.pop("KERAS_PROGRESS", None)
    cases = {
        # case: (command, on a terminal?, KERAS_PROGRESS, expect the bar?)
        "terminal": ([tool], True, None, True),
        "pipe": ([tool], False, None, False),
        "mpirun_pipe": (mpirun + [tool], False, None, False),
        "mpirun_terminal": (mpirun + [tool], True, None, True),
        "flag_lines": ([tool], True, "lines", False),
        "flag_bar": (mpirun + ["-x", "KERAS_PROGRESS", tool], False, "bar", True),
        "explicit_bar_pipe": (mpirun + [tool, "--verbose", "1"], False, None, False),
    }
    if case not in cases:
        sys.exit(f"unknown case {case!r}; cases: {', '.join(cases)}")
    command, terminal, flag, expect_bar = cases[case]
    if flag is not None:
        environment["KERAS_PROGRESS"] = flag
    status, output = (run_on_terminal if terminal else run_piped)(command, environment)
    shown = output.replace("\x1b", "<ESC>").replace("\r", "<CR>")
    print(shown[-3000:])
    if status != 0:
        sys.exit(f"FAIL: the program exited with {status}")
    epochs = output.count("Epoch ")
    finished = sum(1 for line in output.replace("\r", "\n").splitlines()
                   if line.startswith("64/64") or line.startswith(ESCAPE + "64/64"))
    if epochs != 2 or finished < 2:
        sys.exit(f"FAIL: expected 2 epochs with a finished line each, found {epochs} and {finished}")
    has_bar = ESCAPE in output
    if has_bar != expect_bar:
        sys.exit(f"FAIL: {case}: expected {'the bar' if expect_bar else 'no escape codes'}, "
                 f"got {'escape codes' if has_bar else 'none'}")
    if not expect_bar and output.count("64/64") != 2:
        sys.exit("FAIL: one line per epoch expected")
    print(f"PASS: {case}: {'bar redrawn in place' if has_bar else 'one line per epoch'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
