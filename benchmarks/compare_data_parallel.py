"""Data-parallel training step: keras-cpp (MPI or Gloo) beside PyTorch DDP (gloo), in the same run.

Model MLP 784-1024-1024-10, Adam, global batch 128 split evenly over P processes, one thread
per process. For each P it runs our data_parallel_step under mpirun and the same step in
PyTorch DDP (torch.multiprocessing, gloo backend, loopback only), alternating, and prints ms/step
and samples/s of both, the ratio, and each side's exposed communication (step time with
gradient sync minus the same processes without it).

With --backend gloo our processes are started by hand (scripts/launch_local.sh) and run on
Gloo, the engine DDP uses here too.

Usage: compare_data_parallel.py [PATH/TO/data_parallel_step] [--processes 1,2,4] [--steps 30]
                                [--backend mpi|gloo]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


LAUNCH_LOCAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "launch_local.sh")


def run_ours(binary, processes, steps, backend="mpi"):
    if backend == "gloo":
        command = ["bash", LAUNCH_LOCAL, str(processes), binary, "--steps", str(steps), "--json"]
    else:
        command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(processes),
                   "-x", "KERAS_NUM_THREADS=1", binary, "--steps", str(steps), "--json"]
    environment = dict(os.environ, KERAS_NUM_THREADS="1")
    output = subprocess.run(command, check=True, capture_output=True, text=True, env=environment).stdout
    lines = [text.split("] ", 1)[-1] if text.startswith("[process") else text for text in output.splitlines()]
    line = [text for text in lines if text.startswith("{")][-1]
    return json.loads(line)


def torch_worker(rank, processes, steps, port, results):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=processes)
    torch.manual_seed(42)
    global_batch = 128
    local = global_batch // processes
    x = torch.rand(global_batch, 784)[rank * local:(rank + 1) * local]
    y = torch.randint(0, 10, (global_batch,))[rank * local:(rank + 1) * local]

    def model():
        return torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                   torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                   torch.nn.Linear(1024, 10))

    def timed(network, sync):
        optimizer = torch.optim.Adam(network.parameters(), lr=1e-3)
        loss_function = torch.nn.CrossEntropyLoss()
        times = []
        for step in range(5 + steps):
            dist.barrier()
            begin = time.perf_counter()
            optimizer.zero_grad()
            loss_function(network(x), y).backward()
            optimizer.step()
            elapsed = torch.tensor([time.perf_counter() - begin])
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            if step >= 5:
                times.append(elapsed.item())
        return statistics.median(times)

    with_sync = timed(torch.nn.parallel.DistributedDataParallel(model()), True)
    without_sync = timed(model(), False)
    if rank == 0:
        results.put((with_sync, without_sync))
    dist.destroy_process_group()


def run_torch(processes, steps, port):
    import torch.multiprocessing as multiprocessing
    context = multiprocessing.get_context("spawn")
    results = context.SimpleQueue()
    workers = [context.Process(target=torch_worker, args=(rank, processes, steps, port, results))
               for rank in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a PyTorch DDP worker exited with {worker.exitcode}")
    with_sync, without_sync = results.get()
    return {"step_ms": with_sync * 1e3, "step_without_sync_ms": without_sync * 1e3}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary", nargs="?", default="./build/release/benchmarks/data_parallel_step")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--backend", choices=["mpi", "gloo"], default="mpi",
                        help="how our processes run: under mpirun (MPI) or started by hand (Gloo)")
    parser.add_argument("--openblas-coretype", metavar="NAME",
                        help="set OPENBLAS_CORETYPE (and OPENBLAS_NUM_THREADS=1) for PyTorch: "
                             "Debian's OpenBLAS 0.3.21 picks its generic Prescott kernels on some "
                             "AVX-512 CPUs; SkylakeX gives PyTorch its fast ones")
    arguments = parser.parse_args()
    if arguments.openblas_coretype:
        # Before torch is imported here or in the spawned workers, which inherit the environment.
        os.environ["OPENBLAS_CORETYPE"] = arguments.openblas_coretype
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if not os.access(arguments.binary, os.X_OK):
        sys.exit(f"no executable at {arguments.binary}; build the data_parallel_step target first")
    import torch
    print(f"torch {torch.__version__}; global batch 128; 1 thread per process; "
          f"{os.cpu_count()} CPUs; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    rows = []
    port = 29500
    for processes in [int(text) for text in arguments.processes.split(",")]:
        ours = run_ours(arguments.binary, processes, arguments.steps, arguments.backend)
        port += 1
        theirs = run_torch(processes, arguments.steps, port)
        rows.append((processes, ours, theirs))

    def exposed(result):
        return max(0.0, result["step_ms"] - result["step_without_sync_ms"]) / result["step_ms"]

    print()
    print("processes  keras-cpp ms  samples/s  exposed comm  |  DDP ms  samples/s  exposed comm  |  speed-up (DDP ms / ours)")
    for processes, ours, theirs in rows:
        print(f"{processes:9d}  {ours['step_ms']:12.2f}  {128e3 / ours['step_ms']:9.0f}  {exposed(ours):11.0%}"
              f"  |  {theirs['step_ms']:6.2f}  {128e3 / theirs['step_ms']:9.0f}  {exposed(theirs):11.0%}"
              f"  |  {theirs['step_ms'] / ours['step_ms']:5.2f}x")


if __name__ == "__main__":
    main()
