#!/usr/bin/python3
"""Compares one training step of keras-cpp with the same step in PyTorch on CPU.

The step is that of an MLP 784-1024-1024-10 (ReLU) at batch 128: forward pass, cross-entropy
from logits, backward pass, Adam update (lr 1e-3). keras-cpp's time comes from
training_step_benchmark (Google Benchmark, JSON output); PyTorch's from the same step timed here
with time.perf_counter. For each thread count the two runs alternate, round after round, so that
both see the same machine conditions; the table shows medians over the rounds.

Each PyTorch measurement runs in a fresh child process (this script with --torch-worker): OpenBLAS
reads OPENBLAS_CORETYPE only when it is loaded, so that is the only way --unset-openblas-coretype
can take effect, and it gives both programs the same footing (a fresh process per measurement).
Debian's PyTorch does its float32 matmuls in OpenBLAS, whose run-time CPU detection can pick slow
kernels on CPUs it does not know (0.3.21 picks Prescott, SSE3 only, on a Sapphire Rapids VM), and
whose own thread pool ignores torch.set_num_threads; each row therefore says which OpenBLAS core
and thread count PyTorch ran with, and --openblas-coretype / --match-openblas-threads change them.

  compare_training_step.py [BINARY] [--threads 1,2] [--rounds 3] [--unset-openblas-coretype]
                           [--openblas-coretype NAME] [--match-openblas-threads]

Uses only the standard library and torch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_BINARY = "./build/release/benchmarks/training_step_benchmark"
BATCH_SIZE = 128
INPUT_FEATURES = 784
HIDDEN_UNITS = 1024
CLASSES = 10
# OpenBLAS' tuning overrides: removed for PyTorch by --unset-openblas-coretype.
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
OPENBLAS_LIBRARY = "libopenblas.so.0"


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binary", nargs="?", default=DEFAULT_BINARY,
                        help=f"path of training_step_benchmark (default {DEFAULT_BINARY})")
    parser.add_argument("--threads", default="1,2",
                        help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating keras-cpp/PyTorch measurements per thread count")
    parser.add_argument("--keras-min-time", type=float, default=1.0,
                        help="seconds Google Benchmark spends per repetition (default 1.0)")
    parser.add_argument("--keras-repetitions", type=int, default=3,
                        help="Google Benchmark repetitions per round; their median is used")
    parser.add_argument("--torch-warmup", type=int, default=5,
                        help="untimed PyTorch steps before timing (default 5)")
    parser.add_argument("--torch-steps", type=int, default=30,
                        help="timed PyTorch steps per round; their median is used (default 30)")
    parser.add_argument("--unset-openblas-coretype", action="store_true",
                        help="remove OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for the PyTorch runs")
    parser.add_argument("--openblas-coretype", metavar="NAME",
                        help="set OPENBLAS_CORETYPE=NAME (e.g. SkylakeX, Haswell) for PyTorch")
    parser.add_argument("--match-openblas-threads", action="store_true",
                        help="set OPENBLAS_NUM_THREADS to the thread count for PyTorch, so that "
                             "its BLAS pool has as many threads as torch.set_num_threads")
    # Internal: the child process that times PyTorch and prints one JSON line.
    parser.add_argument("--torch-worker", type=int, metavar="THREADS", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    try:
        arguments.thread_counts = [int(text) for text in arguments.threads.split(",") if text]
    except ValueError:
        parser.error(f"--threads: '{arguments.threads}' is not a comma-separated list of integers")
    if not arguments.thread_counts or min(arguments.thread_counts) < 1:
        parser.error("--threads needs at least one thread count, each at least 1")
    if arguments.rounds < 1:
        parser.error("--rounds must be at least 1")
    return arguments


def openblas_state():
    """The OpenBLAS core and thread count this process runs with, as far as it can tell."""
    import ctypes
    try:
        library = ctypes.CDLL(OPENBLAS_LIBRARY, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        return {"openblas_core": "(not loaded)", "openblas_threads": None}
    library.openblas_get_corename.restype = ctypes.c_char_p
    return {"openblas_core": library.openblas_get_corename().decode(),
            "openblas_threads": library.openblas_get_num_threads()}


def torch_worker(threads, warmup_steps, timed_steps):
    """Times the PyTorch step in this process and prints {"ms_per_step": …, …} as JSON."""
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(INPUT_FEATURES, HIDDEN_UNITS), nn.ReLU(),
                          nn.Linear(HIDDEN_UNITS, HIDDEN_UNITS), nn.ReLU(),
                          nn.Linear(HIDDEN_UNITS, CLASSES))
    loss_function = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs = torch.rand(BATCH_SIZE, INPUT_FEATURES, dtype=torch.float32)
    labels = torch.randint(0, CLASSES, (BATCH_SIZE,), dtype=torch.int64)

    def step():
        optimizer.zero_grad()
        loss = loss_function(model(inputs), labels)
        loss.backward()
        optimizer.step()
        # keras-cpp's train_on_batch returns the loss as a double; read it here too.
        return loss.item()

    first_loss = step()
    for _ in range(warmup_steps - 1):
        step()
    durations = []
    loss = first_loss
    for _ in range(timed_steps):
        start = time.perf_counter()
        loss = step()
        durations.append(time.perf_counter() - start)
    print(json.dumps({"ms_per_step": 1e3 * statistics.median(durations),
                      "threads": torch.get_num_threads(), "first_loss": first_loss,
                      "final_loss": loss, **openblas_state()}))


def torch_environment(threads, arguments):
    environment = dict(os.environ)
    if arguments.unset_openblas_coretype:
        for name in OPENBLAS_OVERRIDES:
            environment.pop(name, None)
    if arguments.openblas_coretype:
        environment["OPENBLAS_CORETYPE"] = arguments.openblas_coretype
    if arguments.match_openblas_threads:
        environment["OPENBLAS_NUM_THREADS"] = str(threads)
    return environment


def measure_torch(threads, arguments):
    environment = torch_environment(threads, arguments)
    command = [sys.executable, os.path.abspath(__file__), "--torch-worker", str(threads),
               "--torch-warmup", str(arguments.torch_warmup),
               "--torch-steps", str(arguments.torch_steps)]
    result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"PyTorch worker failed ({result.returncode}):\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure_keras(threads, arguments):
    environment = dict(os.environ, KERAS_NUM_THREADS=str(threads))
    command = [arguments.binary, "--benchmark_format=json",
               f"--benchmark_filter=BM_TrainingStep/batch:{BATCH_SIZE}/on_gpu:0/",
               f"--benchmark_min_time={arguments.keras_min_time}",
               f"--benchmark_repetitions={arguments.keras_repetitions}",
               "--benchmark_report_aggregates_only=true"]
    result = subprocess.run(command, env=environment, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{arguments.binary} failed ({result.returncode}):\n{result.stderr}")
    report = json.loads(result.stdout)
    reported_threads = report["context"].get("keras_num_threads")
    if reported_threads != str(threads):
        sys.exit(f"asked keras-cpp for {threads} threads, it reports {reported_threads}")
    milliseconds_per_unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    for entry in report["benchmarks"]:
        if entry.get("error_occurred"):
            sys.exit(f"keras-cpp benchmark failed: {entry.get('error_message')}")
        if entry.get("aggregate_name") == "median" or (
                arguments.keras_repetitions == 1 and entry.get("run_type") == "iteration"):
            return {"ms_per_step": entry["real_time"] * milliseconds_per_unit[entry["time_unit"]]}
    sys.exit(f"no batch-{BATCH_SIZE} median in the output of {arguments.binary}")


def torch_version():
    # Asked in a child so that this process never loads OpenBLAS under either environment.
    result = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def main():
    arguments = parse_arguments()
    if arguments.torch_worker is not None:
        torch_worker(arguments.torch_worker, max(arguments.torch_warmup, 1),
                     max(arguments.torch_steps, 1))
        return
    if not os.access(arguments.binary, os.X_OK):
        sys.exit(f"{arguments.binary} is not an executable; build training_step_benchmark or "
                 "pass its path")

    coretype = os.environ.get("OPENBLAS_CORETYPE", "(unset)")
    l2_size = os.environ.get("OPENBLAS_L2_SIZE", "(unset)")
    print(f"torch {torch_version()}; batch {BATCH_SIZE}; {os.cpu_count()} CPUs")
    torch_coretype = torch_environment(1, arguments).get("OPENBLAS_CORETYPE", "(unset)")
    torch_l2_size = torch_environment(1, arguments).get("OPENBLAS_L2_SIZE", "(unset)")
    print(f"this environment: OPENBLAS_CORETYPE={coretype} OPENBLAS_L2_SIZE={l2_size}; "
          f"PyTorch runs with OPENBLAS_CORETYPE={torch_coretype} "
          f"OPENBLAS_L2_SIZE={torch_l2_size}"
          + (" (--unset-openblas-coretype)" if arguments.unset_openblas_coretype else "")
          + (", OPENBLAS_NUM_THREADS=<threads>" if arguments.match_openblas_threads else ""))
    print(f"{arguments.rounds} alternating rounds per thread count; keras-cpp: median of "
          f"{arguments.keras_repetitions} x {arguments.keras_min_time} s; PyTorch: median of "
          f"{arguments.torch_steps} steps after {arguments.torch_warmup} warm-up steps")

    rows = []
    for threads in arguments.thread_counts:
        keras_times, torch_times, openblas_states = [], [], set()
        for round_index in range(arguments.rounds):
            # Alternating which goes first cancels a slow drift (thermal, a neighbour's load).
            order = ("keras", "torch") if round_index % 2 == 0 else ("torch", "keras")
            for which in order:
                if which == "keras":
                    keras_times.append(measure_keras(threads, arguments)["ms_per_step"])
                else:
                    result = measure_torch(threads, arguments)
                    if result["threads"] != threads:
                        sys.exit(f"asked PyTorch for {threads} threads, it uses "
                                 f"{result['threads']}")
                    torch_times.append(result["ms_per_step"])
                    openblas_states.add((result["openblas_core"], result["openblas_threads"]))
            print(f"  threads {threads} round {round_index + 1}: keras-cpp "
                  f"{keras_times[-1]:.2f} ms, PyTorch {torch_times[-1]:.2f} ms", flush=True)
        rows.append((threads, statistics.median(keras_times), statistics.median(torch_times),
                     ", ".join(f"{core}/{blas_threads}" for core, blas_threads in
                               sorted(openblas_states, key=str))))

    print()
    print(f"{'threads':>7}  {'keras-cpp ms/step':>17}  {'PyTorch ms/step':>15}  "
          f"{'ratio (ours/PyTorch)':>20}  PyTorch's OpenBLAS core/threads")
    for threads, keras_ms, torch_ms, openblas in rows:
        print(f"{threads:>7}  {keras_ms:>17.2f}  {torch_ms:>15.2f}  {keras_ms / torch_ms:>20.2f}  "
              f"{openblas}")
    print("ratio < 1 means keras-cpp is faster")


if __name__ == "__main__":
    main()
