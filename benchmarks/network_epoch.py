#!/usr/bin/env python3
"""One data-parallel epoch across two "hosts" of the namespace test bed (scripts/netns_cluster.sh:
10.0.0.1 and 10.0.0.2 on a bridge of their own) under a network's delay and rate: keras-cpp's
Fashion-MNIST example (the MLP 784-512-256-10, Adam, global batch 128, on Gloo, started by hand
as on two machines) beside PyTorch DDP on gloo with the same model, batch and data, in the same
run, conditions and sides interleaved, medians. Training only (no validation), one thread each.

Delay is each way (netns_cluster.sh `delay` on both hosts: tests/netns/packet_delay.cpp, since
this kernel has no sch_netem); the rate is a tbf on each host's link. For each condition the
table gives each side's epoch, ours against DDP's, each side's ratio to its own undelayed
epoch, what the condition added to our epoch, and the link's floor for that: per step, one
trip of the delay and the 2.1 MB of float32 gradients through the link (on 2 processes an
all-reduce must send and receive each process's whole buffer once), with no overlap of
communication and compute. The undelayed epoch's own (loopback-speed) transfer is replaced
by the link's, so "added" can fall below the floor where the link is fast.

Needs root, iproute2, iptables-legacy and python3-torch (the DDP side is skipped without it).
Usage: network_epoch.py --build build/ci [--conditions none,1ms/10gbit,5ms/1gbit] [--rounds 2]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "scripts", "netns_cluster.sh")
GRADIENT_BYTES = 4 * (784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10)
STEPS = (60000 + 127) // 128

TORCH_WORKER = r"""
import gzip, os, sys, time
import numpy as np
import torch
import torch.distributed as dist
rank = int(sys.argv[1])
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=rank, world_size=2)
def read(name, offset):
    with gzip.open(os.path.join("/usr/share/datasets/fashion-mnist", name)) as handle:
        return np.frombuffer(handle.read(), np.uint8, offset=offset)
x = torch.from_numpy(read("train-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype(np.float32) / 255.0)
y = torch.from_numpy(read("train-labels-idx1-ubyte.gz", 8).astype(np.int64))
torch.manual_seed(42)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 10)))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_function = torch.nn.CrossEntropyLoss()
order = torch.randperm(x.shape[0])
dist.barrier()
begin = time.perf_counter()
for start in range(0, x.shape[0], 128):
    rows = order[start:start + 128]
    half = (rows.shape[0] + 1) // 2
    mine = rows[:half] if rank == 0 else rows[half:]
    optimizer.zero_grad(set_to_none=True)
    loss = loss_function(model(x[mine]), y[mine])
    loss.backward()
    optimizer.step()
dist.barrier()
if rank == 0:
    print(f"torch epoch {time.perf_counter() - begin:.3f} s loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
"""


def cluster(*arguments):
    result = subprocess.run(["bash", CLUSTER, *arguments], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=120)
    if result.returncode != 0:
        raise SystemExit(f"netns_cluster.sh {' '.join(arguments)} failed ({result.returncode}):\n{result.stdout}")


def on_hosts(commands, environments, limit=600):
    """Runs commands[i] on host i+1 at once; returns process 0's output (both must succeed)."""
    processes = [subprocess.Popen(["bash", CLUSTER, "exec", str(i + 1), *command], env=environments[i],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for i, command in enumerate(commands)]
    outputs = [process.communicate(timeout=limit)[0] for process in processes]
    for process, output in zip(processes, outputs):
        if process.returncode != 0:
            raise SystemExit(f"a host's process failed ({process.returncode}):\n{output}")
    return outputs[0]


def ours(build):
    example = os.path.join(build, "examples", "fashion_mnist", "fashion_mnist")
    environments = []
    for process_id in range(2):
        environments.append(dict(os.environ, KERAS_NUM_THREADS="1", KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                                 KERAS_DISTRIBUTION_JOB_ADDRESSES="10.0.0.1:1234,10.0.0.2:2345",
                                 KERAS_DISTRIBUTION_PROCESS_ID=str(process_id)))
    command = [example, "--epochs", "1", "--skip-validation", "--distribution", "data_parallel", "--threads", "1"]
    output = on_hosts([command, command], environments)
    found = re.search(r"\(([\d.]+) s per epoch\)", output)
    if not found:
        raise SystemExit(f"no epoch time in our output:\n{output}")
    return float(found.group(1))


def python_with_torch():
    """This interpreter, or Debian's (python3-torch installs there) when this one lacks torch."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([candidate, "-c", "import torch"], capture_output=True).returncode == 0:
            return candidate
    return None


def torch_ddp(python):
    environments = [dict(os.environ, MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", GLOO_SOCKET_IFNAME="eth0",
                         OMP_NUM_THREADS="1") for _ in range(2)]
    output = on_hosts([[python, "-c", TORCH_WORKER, str(rank)] for rank in range(2)], environments)
    found = re.search(r"torch epoch ([\d.]+) s", output)
    if not found:
        raise SystemExit(f"no epoch time in PyTorch's output:\n{output}")
    return float(found.group(1))


def parse_condition(text):
    if text == "none":
        return 0.0, ""
    found = re.fullmatch(r"([\d.]+)ms/(\d+[kmg]bit)", text)
    if not found:
        raise SystemExit(f"a condition is 'none' or DELAYms/RATE (e.g. 1ms/10gbit), got '{text}'")
    return float(found.group(1)), found.group(2)


def rate_bits(rate):
    return float(rate[:-4]) * {"k": 1e3, "m": 1e6, "g": 1e9}[rate[-4]] if rate else float("inf")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True)
    parser.add_argument("--conditions", default="none,1ms/10gbit,5ms/1gbit")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-torch", action="store_true")
    arguments = parser.parse_args()
    os.environ.setdefault("KERAS_NETNS_PREFIX", f"kerasnet{os.getpid() % 100000}")
    os.environ["KERAS_PACKET_DELAY"] = os.path.join(arguments.build, "tests", "packet_delay")
    python = None if arguments.no_torch else python_with_torch()
    conditions = arguments.conditions.split(",")
    times = {(condition, side): [] for condition in conditions for side in ("ours", "ddp")}
    try:
        for round_index in range(arguments.rounds):
            for condition in conditions:
                delay, rate = parse_condition(condition)
                cluster("up", "2", *([rate] if rate else []))
                if delay > 0:
                    cluster("delay", "1", str(delay))
                    cluster("delay", "2", str(delay))
                sides = [("ours", lambda: ours(arguments.build))] + ([("ddp", lambda: torch_ddp(python))] if python else [])
                if round_index % 2:
                    sides.reverse()
                for side, run in sides:
                    seconds = run()
                    times[(condition, side)].append(seconds)
                    print(f"round {round_index + 1} {condition:>12} {side:>4}: {seconds:.2f} s", file=sys.stderr, flush=True)
                cluster("down")
    finally:
        subprocess.run(["bash", CLUSTER, "down"], capture_output=True)
    median = {key: statistics.median(value) for key, value in times.items() if value}
    base = conditions[0]
    print(f"{'condition':>12} {'ours s':>8} {'DDP s':>8} {'ours/DDP':>9} {'ours/undelayed':>15} "
          f"{'DDP/undelayed':>14} {'added s':>8} {'floor s':>8}")
    for condition in conditions:
        delay, rate = parse_condition(condition)
        our = median[(condition, "ours")]
        ddp = median.get((condition, "ddp"))
        undelayed = median[(base, "ours")]
        floor = STEPS * (delay / 1e3 + GRADIENT_BYTES * 8 / rate_bits(rate)) if rate or delay else 0.0
        ddp_text = f"{ddp:8.2f} {our / ddp:9.2f}" if ddp else f"{'-':>8} {'-':>9}"
        ddp_ratio = f"{ddp / median[(base, 'ddp')]:14.2f}" if ddp else f"{'-':>14}"
        print(f"{condition:>12} {our:8.2f} {ddp_text} {our / undelayed:15.2f} {ddp_ratio} "
              f"{our - undelayed:8.2f} {floor:8.2f}")


if __name__ == "__main__":
    main()
