#!/usr/bin/env python3
"""Strangers on the coordinator's port of a job started by hand (no mpirun): while process 0
waits for process 1, a program that is not part of the job connects to the rendezvous store
and misbehaves (one stray byte, random bytes, a 4 GiB length prefix, 2000 idle connections,
10,000 keys of 1 MiB), or tries to join without the job's token (a wrong token, a replayed
handshake, none at all), or poses as the coordinator, or keeps connecting while process 0 fails. Each time the job must start and train
(or the stranger be refused, with the reason checked), no process may hang or crash, every
socket of the job must be bound to the job's own address, and the whole run is bounded in time.
Usage: check_strangers.py TOOL CASE"""
import hashlib
import hmac
import os
import random
import re
import resource
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pick_port import pick_port  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from process_helpers import wait_all  # noqa: E402

MAGIC = b"kerasKV1"
TOKEN = "the job's secret 5f1c"
# Well under the store's 10 s handshake deadline: a job that ends this fast was never held up
# by the stranger (the store did not wait for it).
QUICK_SECONDS = 8.0


def process(tool, listing, process_id, token=TOKEN, init_timeout="30"):
    environment = dict(os.environ, KERAS_NUM_THREADS="1", KERAS_DISTRIBUTION_INIT_TIMEOUT_SECONDS=init_timeout,
                       KERAS_DISTRIBUTION_JOB_ADDRESSES=listing, KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                       KERAS_DISTRIBUTION_PROCESS_ID=str(process_id))
    environment.pop("KERAS_DISTRIBUTION_JOB_TOKEN", None)
    if token is not None:
        environment["KERAS_DISTRIBUTION_JOB_TOKEN"] = token
    return subprocess.Popen([tool, "--train", "1", "--list-bound", "1"], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def connect(port, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def read_exactly(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {size} bytes")
        data += chunk
    return data


def read_reason(sock):
    (length,) = struct.unpack("<I", read_exactly(sock, 4))
    return read_exactly(sock, length).decode(errors="replace")


def greeting(sock):
    """The store's first bytes: its mode, and the challenge when it asks for a token."""
    head = read_exactly(sock, len(MAGIC) + 1)
    if head[:len(MAGIC)] != MAGIC:
        raise AssertionError(f"the greeting {head!r} does not begin with {MAGIC!r}")
    mode = chr(head[-1])
    return mode, (read_exactly(sock, 32) if mode == "t" else None)


def proof(token, store_challenge, client_challenge):
    return hmac.new(token.encode(), b"keras rendezvous client" + store_challenge + client_challenge,
                    hashlib.sha256).digest()


def request(operation, key, value=b""):
    return operation + struct.pack("<II", len(key), len(value)) + key + value


class Stranger:
    """What each case does to the store, with the checks of what the store answered."""

    def __init__(self):
        self.held = []
        self.failures = []
        self.notes = []

    def expect(self, condition, message):
        if not condition:
            self.failures.append(message)

    def close(self):
        for sock in self.held:
            sock.close()


def stray_byte(port, stranger):
    sock = connect(port)
    sock.sendall(b"S")
    stranger.held.append(sock)


def random_bytes(port, stranger):
    generator = random.Random(19)
    for size in (1, 7, 9, 100, 4096, 65536):
        sock = connect(port)
        try:
            sock.sendall(bytes(generator.getrandbits(8) for _ in range(size)))
        except OSError:
            pass  # the store may close on a malformed request before all of it is sent
        stranger.held.append(sock)


def length_prefix(port, stranger):
    # A SET announcing a 4 GiB value, then the first bytes of it: refused at the header.
    sock = connect(port)
    mode, _ = greeting(sock)
    stranger.expect(mode == "t", f"the store's mode is {mode!r}, expected 't' (a token is required)")
    sock.close()
    sock = connect(port)
    greeting(sock)
    sock.sendall(struct.pack("<B", 0x53) + struct.pack("<II", 4, 0xFFFFFFFF) + b"job/" + b"x" * 1000)
    stranger.held.append(sock)


def length_prefix_open(port, stranger):
    sock = connect(port)
    mode, _ = greeting(sock)
    stranger.expect(mode == "o", f"the open store's mode is {mode!r}, expected 'o'")
    sock.sendall(struct.pack("<B", 0x53) + struct.pack("<II", 4, 0xFFFFFFFF) + b"job/" + b"x" * 1000)
    status = read_exactly(sock, 1)
    reason = read_reason(sock)
    stranger.expect(status == b"e" and "value of 4294967295 bytes is over the store's limit" in reason,
                    f"a 4 GiB value was answered {status!r} {reason!r}")
    stranger.notes.append(f"4 GiB length prefix refused: {reason}")
    stranger.held.append(sock)


def idle_connections(port, stranger):
    wanted = 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, wanted + 200), hard))
    for _ in range(wanted):
        stranger.held.append(connect(port))
    stranger.notes.append(f"{len(stranger.held)} idle connections held")


def many_large_keys(port, stranger):
    # On an open store (no token): 10,000 SETs of 1 MiB each, from one connection, while the
    # job starts. The store takes them until its byte limit and refuses the rest, with a reason.
    sock = connect(port)
    greeting(sock)
    value = b"v" * (1 << 20)
    stored = refused = 0
    reason = ""
    for index in range(10000):
        sock.sendall(request(b"S", f"stranger/{index}".encode(), value))
        status = read_exactly(sock, 1)
        body = read_reason(sock)
        if status == b"o":
            stored += 1
        else:
            refused += 1
            reason = body
    stranger.expect(refused > 0 and "limit" in reason, f"no SET was refused ({stored} stored): {reason!r}")
    stranger.expect(stored <= 64, f"the store took {stored} MiB of a stranger's values")
    stranger.notes.append(f"10,000 SETs of 1 MiB: {stored} stored, {refused} refused ({reason})")
    sock.close()


def wrong_token(port, stranger):
    sock = connect(port)
    mode, challenge = greeting(sock)
    own = os.urandom(32)
    sock.sendall(own + proof("not the job's token", challenge, own))
    status = read_exactly(sock, 1)
    reason = read_reason(sock) if status == b"e" else ""
    stranger.expect(status == b"e" and "wrong job token" in reason, f"a wrong token was answered {status!r} {reason!r}")
    stranger.expect(sock.recv(1) == b"", "the store kept the connection of a wrong token open")
    stranger.notes.append(f"wrong token refused: {reason}")
    sock.close()
    # Without any proof, a request is not a request: the store waits for the 64-byte answer.
    sock = connect(port)
    greeting(sock)
    sock.sendall(request(b"S", b"join/error", b"the stranger says stop"))
    stranger.held.append(sock)


def replayed_handshake(port, stranger):
    # An answer seen on one connection (computed here with the token, as if sniffed from a
    # process of the job) is played back on another: that connection's challenge differs.
    first = connect(port)
    _, first_challenge = greeting(first)
    own = os.urandom(32)
    seen = own + proof(TOKEN, first_challenge, own)
    second = connect(port)
    _, second_challenge = greeting(second)
    stranger.expect(first_challenge != second_challenge, "two connections got the same challenge")
    second.sendall(seen)
    status = read_exactly(second, 1)
    reason = read_reason(second) if status == b"e" else ""
    stranger.expect(status == b"e" and "wrong job token" in reason,
                    f"a replayed answer was answered {status!r} {reason!r}")
    stranger.notes.append(f"replayed handshake refused: {reason}")
    second.close()
    first.close()


def impostor(port, stranger):
    """Poses as the coordinator: greets with a challenge and answers a proof it cannot make."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()

    def serve():
        try:
            client, _ = server.accept()
            client.sendall(MAGIC + b"t" + os.urandom(32))
            read_exactly(client, 64)
            client.sendall(b"o" + os.urandom(32))
            stranger.held.append(client)
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    stranger.held.append(server)
    return thread


def connections_until(port, finished, stranger):
    """Connects and hangs up in a loop until `finished` is set (bounded at 20 s)."""
    deadline = time.monotonic() + 20
    made = 0
    while not finished.is_set() and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            made += 1
        except OSError:
            time.sleep(0.001)
    stranger.notes.append(f"{made} connections made while process 0 waited and ended")


# case: (attack, job token, what each process must print)
TRAINS = [(True, r"trained: loss=\S+ equal on every process")] * 2
CASES = {
    "stray_byte": (stray_byte, TOKEN, TRAINS),
    "stray_byte_open": (stray_byte, None, TRAINS),
    "random_bytes": (random_bytes, TOKEN, TRAINS),
    "random_bytes_open": (random_bytes, None, TRAINS),
    "length_prefix_4gib": (length_prefix, TOKEN, TRAINS),
    "length_prefix_4gib_open": (length_prefix_open, None, TRAINS),
    "idle_connections": (idle_connections, TOKEN, TRAINS),
    "idle_connections_open": (idle_connections, None, TRAINS),
    "many_large_keys_open": (many_large_keys, None, TRAINS),
    "wrong_token": (wrong_token, TOKEN, TRAINS),
    "replayed_handshake": (replayed_handshake, TOKEN, TRAINS),
}


# case: (the job's token, [(the stray process's token, what it must say)])
STRAY_PROCESSES = {
    "process_without_token": (TOKEN, [(None, r"requires a job token and this process has none")]),
    "process_with_another_token": (TOKEN, [("another token",
                                            r"refused this process's job token \(wrong job token")]),
    "process_with_token_open_store": (None, [(TOKEN, r"was given a job token but the coordinator at \S+ asks for none")]),
}


def check_bound(index, output, host):
    """Every socket the process bound is on its own job address, never every interface."""
    found = re.search(r"^bound:(.*)$", output, re.M)
    if not found:
        return [f"process {index} printed no bound addresses"]
    addresses = found.group(1).split()
    wrong = [a for a in addresses if a.rsplit(":", 1)[0] != host]
    return [f"process {index} bound {wrong}, expected only {host}"] if wrong or not addresses else []


def report(case, results, expected, elapsed, stranger, bound_hosts, limit):
    failures = list(stranger.failures)
    for index, ((status, output), (must_succeed, pattern)) in enumerate(zip(results, expected)):
        print(f"--- process {index} (status {status}):\n{output}")
        if must_succeed != (status == 0):
            failures.append(f"process {index} exited with status {status}")
        if status < 0:
            failures.append(f"process {index} was killed by signal {-status} (a crash)")
        if not re.search(pattern, output):
            failures.append(f"process {index} lacks /{pattern}/")
        if must_succeed and index < len(bound_hosts):
            failures += check_bound(index, output, bound_hosts[index])
    for note in stranger.notes:
        print("stranger:", note)
    print(f"{case}: the job ended after {elapsed:.2f} s")
    if limit is not None and elapsed > limit:
        failures.append(f"the job took {elapsed:.2f} s, more than {limit} s: the stranger held it up")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


def main():
    tool, case = sys.argv[1:3]
    port = pick_port(2)
    listing = f"127.0.0.1:{port},127.0.0.2:{port + 1}"
    hosts = ["127.0.0.1", "127.0.0.2"]
    stranger = Stranger()
    started = time.monotonic()
    if case in CASES:
        attack, token, expected = CASES[case]
        processes = [process(tool, listing, 0, token)]
        try:
            connect(port, timeout=20).close()  # process 0's store is up
            attack(port, stranger)
        except Exception as error:  # noqa: BLE001 - any failure of the attack is reported
            stranger.failures.append(f"the stranger's attack failed: {error!r}")
        processes.append(process(tool, listing, 1, token))
        limit = None if case == "many_large_keys_open" else QUICK_SECONDS
    elif case in STRAY_PROCESSES:
        # Processes of the job given the wrong token (or none, or one where the job has none)
        # are refused at once with the reason; then the right process 1 joins and the job trains.
        job_token, strays = STRAY_PROCESSES[case]
        processes = [process(tool, listing, 0, job_token)]
        connect(port, timeout=20).close()
        stray_processes = [process(tool, listing, 1, token) for token, _ in strays]
        stray_results = wait_all(stray_processes, 30) or []
        stranger.expect(len(stray_results) == len(strays), "a process with a wrong token hung")
        for (status, output), (_, pattern) in zip(stray_results, strays):
            print(f"--- process 1 with a wrong token (status {status}):\n{output}")
            stranger.expect(status > 0 and re.search(pattern, output) is not None, f"it lacks /{pattern}/")
        processes.append(process(tool, listing, 1, job_token))
        expected, limit = TRAINS, None
    elif case == "connections_while_coordinator_fails":
        # Process 0 alone, whose process 1 never comes: it must end with its error (status 1),
        # not crash, while strangers keep connecting as it exits (its store's thread draws a
        # challenge for each one; it once did so after libcrypto's exit handler had run).
        processes = [process(tool, listing, 0, TOKEN, init_timeout="1.5")]
        connect(port, timeout=20).close()
        finished = threading.Event()
        flood = threading.Thread(target=connections_until, args=(port, finished, stranger))
        flood.start()
        results = wait_all(processes, 60)
        finished.set()
        flood.join()
        expected = [(False, r"processes 1 of 2 did not join the job")]
        elapsed = time.monotonic() - started
        if results is None:
            print(f"FAIL: {case}: process 0 still ran after 60 s (a hang)")
            return 1
        return report(case, results, expected, elapsed, stranger, hosts, None)
    elif case == "impostor_coordinator":
        thread = impostor(port, stranger)
        processes = [process(tool, listing, 1)]
        expected = [(False, r"could not prove that it knows the job token: it is not this job's coordinator")]
        limit = None
        thread.join(timeout=1)
    else:
        print(f"unknown case {case}")
        return 2
    results = wait_all(processes, 60)
    elapsed = time.monotonic() - started
    stranger.close()
    if results is None:
        print(f"FAIL: {case}: the processes still ran after 60 s (a hang)")
        return 1
    return report(case, results, expected, elapsed, stranger, hosts, limit)


if __name__ == "__main__":
    sys.exit(main())
