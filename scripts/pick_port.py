#!/usr/bin/env python3
"""Prints a TCP port for a job's coordinator on this machine, with COUNT consecutive ports
from it free on 127.0.0.1 now. It is drawn at random from just below the kernel's ephemeral
range (/proc/sys/net/ipv4/ip_local_port_range), never from inside it: a port the kernel hands
out for bind(0) can be taken, between this check and the coordinator's bind, as the local end
of any outgoing connection on the machine (a CI run failed that way, with two Gloo tests
connecting in parallel). Usage: pick_port.py [COUNT]"""
import random
import socket
import sys


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as listing:
            low, high = (int(field) for field in listing.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free(port):
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def pick_port(count=1):
    low, high = ephemeral_range()
    first, last = (max(1024, low - 12000), low - count) if low - count > 2048 else (high + 1, 65535 - count)
    for _ in range(200):
        port = random.randint(first, last)
        if all(free(port + offset) for offset in range(count)):
            return port
    raise SystemExit(f"pick_port.py: no {count} consecutive free ports found in {first}-{last + count - 1}")


if __name__ == "__main__":
    text = sys.argv[1] if len(sys.argv) > 1 else "1"
    if not text.isdigit():
        raise SystemExit(f"pick_port.py: COUNT must be a whole number in 1-1000, got '{text}'")
    count = int(text)
    if count < 1 or count > 1000:
        raise SystemExit(f"pick_port.py: COUNT must be in 1-1000, got {count}")
    print(pick_port(count))
