"""The plot scripts draw what CSVLogger and all_reduce_perf --csv write, and refuse what they
cannot draw: the history plot on a file in CSVLogger's exact format (NA cells, a learning-rate
column, ';' as separator), the all-reduce plot on rows in all_reduce_perf's columns; each
output must be a PNG of a plausible size. Skipped (77) where matplotlib is not installed
(`bash scripts/install_dependencies.sh --plots`).

usage: check_plots.py SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DEBIAN_PYTHON = "/usr/bin/python3"


def have_matplotlib():
    for python in {sys.executable, DEBIAN_PYTHON}:
        if os.path.exists(python) and subprocess.run([python, "-c", "import matplotlib"],
                                                     capture_output=True).returncode == 0:
            return True
    return False


def run(script, *arguments):
    return subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True,
                          timeout=120)


def expect_png(path):
    with open(path, "rb") as handle:
        data = handle.read()
    if not data.startswith(PNG_SIGNATURE) or len(data) < 10_000:
        sys.exit(f"FAIL: {path} is not a plausible PNG ({len(data)} bytes)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    scripts = os.path.join(sys.argv[1], "scripts")
    if not have_matplotlib():
        print("SKIP: matplotlib is not installed (bash scripts/install_dependencies.sh --plots)")
        return 77
    with tempfile.TemporaryDirectory(prefix="keras_plots_") as scratch:
        history = os.path.join(scratch, "history.csv")
        with open(history, "w", encoding="utf-8") as handle:
            handle.write("epoch;accuracy;learning_rate;loss;val_accuracy;val_loss\n")
            handle.write("0;0.61;0.01;0.93;NA;NA\n")
            handle.write("1;0.74;0.01;0.71;0.72;0.75\n")
            handle.write("2;0.80;0.001;0.52;0.79;0.58\n")
        result = run(os.path.join(scripts, "plot_history.py"), history, "-o",
                     os.path.join(scratch, "history.png"))
        if result.returncode != 0 or "loss, accuracy, learning_rate over 3 epochs" not in result.stdout:
            sys.exit(f"FAIL: plot_history.py: {result.stdout}{result.stderr}")
        expect_png(os.path.join(scratch, "history.png"))

        results = os.path.join(scratch, "all_reduce.csv")
        with open(results, "w", encoding="utf-8") as handle:
            handle.write("backend,implementation,processes,size_bytes,count,dtype,operation,placement,"
                         "time_us,algbw_gbps,busbw_gbps,wrong\n")
            for size, ours, raw in ((1024, 1.2, 1.5), (65536, 3.0, 3.1), (1 << 20, 8.6, 8.7)):
                for name, busbw in (("keras-cpp", ours), ("raw MPI_Allreduce", raw)):
                    for placement in ("out-of-place", "in-place"):
                        handle.write(f"MPI,{name},2,{size},{size // 4},float,sum,{placement},"
                                     f"1.0,{busbw},{busbw},0\n")
        result = run(os.path.join(scripts, "plot_all_reduce.py"), results, "-o",
                     os.path.join(scratch, "all_reduce.png"))
        if result.returncode != 0 or "2 lines over 3 sizes" not in result.stdout:
            sys.exit(f"FAIL: plot_all_reduce.py: {result.stdout}{result.stderr}")
        expect_png(os.path.join(scratch, "all_reduce.png"))

        # Files they cannot draw: a clear message, not a traceback.
        result = run(os.path.join(scripts, "plot_all_reduce.py"), history)
        if result.returncode == 0 or "lacks the columns" not in result.stderr:
            sys.exit(f"FAIL: plot_all_reduce.py took a history file: {result.stdout}{result.stderr}")
        empty = os.path.join(scratch, "empty.csv")
        open(empty, "w").close()
        result = run(os.path.join(scripts, "plot_history.py"), empty)
        if result.returncode == 0 or "is empty" not in result.stderr:
            sys.exit(f"FAIL: plot_history.py took an empty file: {result.stdout}{result.stderr}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
