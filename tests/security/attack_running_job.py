#!/usr/bin/python3
"""Attacks a running chorus job and checks that it is refused without disturbing the job.

Runs `chorusrun -np 4 security_job attacked` with CHORUS_BACKEND=tcp (see security_job.cc for the
job's side). Rank 3 holds back from the world's TCP mesh, so ranks 0-2 wait in their transport
bootstrap with their listeners open (the listeners close once the mesh is connected: bootstrap.cc
keeps no listener afterwards, which this test also checks). During that window this driver:

  1. checks that every listening socket of chorusrun and the ranks is bound to 127.0.0.1, and
     that the token is in no command line (and in a rank's environment only, mode 0400);
  2. attacks each transport listener: a wrong-token client claiming to be a rank the listener
     waits for, garbage, an oversized length prefix, a valid hello followed by an oversized frame,
     a port scanner (connect/close and connect/reset, many times), and clients that connect and
     say nothing (which must hold up nobody: the mesh must connect well before the listener's
     10 s handshake deadline, and they are cut off once it has);
  3. records, as a man in the middle, one genuine transport handshake (made by rank 3) and one
     genuine store session (which adds 1 to a canary key), and replays both.

Then rank 3 joins, and the job runs checked collectives while the store is attacked in rounds
(the same attacks plus replays and clients that stall mid-handshake) until this driver says stop.
The job must exit 0 with "security_job: OK", the replayed store session must not have run again
(canary still 1), and no attack may ever get an "accepted" verdict. --no-attack runs the same job
without attacks, for comparing the time per iteration.
"""

import argparse
import os
import secrets
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from security_common import (  # noqa: E402
    CHALLENGE_BYTES, HELLO_BYTES, IO_TIMEOUT, MAGIC, RESPONSE_BYTES, Failures, Job, RecordingProxy,
    check_token_exposure, closed_by_peer, connect, handshake_with_token, job_environment,
    listening_sockets, recv_exactly, scratch_directory, token_file)

RANKS = 4
TRANSPORT_PURPOSE = "tcp-transport/world0"
STORE_PURPOSE = "store"
STORE_ROUNDS = 3
SCANS_PER_ROUND = 150
RESETS_PER_ROUND = 50
STALLED_CLIENTS = 8
STALLED_PER_LISTENER = 3
HANDSHAKE_DEADLINE = 10.0  # seconds, kHandshakeTimeout in bootstrap.cc and tcp_store_server.cc


# ---- attacks: each returns True when the target refused it ----------------------------------------

def wrong_token(address, purpose, claimed_id):
    verdict, server_proof_ok = handshake_with_token(address, secrets.token_hex(32), purpose,
                                                    claimed_id)
    return verdict != 1 and not server_proof_ok


def garbage(address):
    with connect(address) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: chorus\r\n\r\n" + os.urandom(64))
        return closed_by_peer(sock)


def oversized_prefix(address):
    with connect(address) as sock:
        sock.sendall(struct.pack("<I", 0xFFFFFFF0) + b"\0" * 60)
        return closed_by_peer(sock)


def oversized_after_hello(address):
    """A well-formed hello, then a frame header claiming ~4 GiB where the proof belongs."""
    with connect(address) as sock:
        sock.sendall(MAGIC + os.urandom(32))
        challenge = recv_exactly(sock, CHALLENGE_BYTES)
        try:
            sock.sendall(struct.pack("<I", 0xFFFFFFF0) + b"\1" * (RESPONSE_BYTES - 4) + b"x" * 4096)
        except OSError:
            return True
        verdict = recv_exactly(sock, 1)
        return len(challenge) == CHALLENGE_BYTES and verdict != b"\x01" and closed_by_peer(sock)


def scan(address, count, reset):
    """Connects and hangs up `count` times (with a RST when `reset`); returns the connects made."""
    host, port = address.rsplit(":", 1)
    made = 0
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(IO_TIMEOUT)
        try:
            sock.connect((host, int(port)))
            made += 1
            if reset:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        finally:
            sock.close()
    return made


def replay(address, client_sent, server_sent):
    """Replays a recorded client byte stream; the server's nonce must be fresh and the proof
    refused, and anything after the handshake (a store request) must not be served."""
    with connect(address) as sock:
        sock.sendall(client_sent[:HELLO_BYTES])
        challenge = recv_exactly(sock, CHALLENGE_BYTES)
        fresh = len(challenge) == CHALLENGE_BYTES and challenge[:32] != server_sent[:32]
        sock.sendall(client_sent[HELLO_BYTES:HELLO_BYTES + RESPONSE_BYTES])
        verdict = recv_exactly(sock, 1)
        try:
            sock.sendall(client_sent[HELLO_BYTES + RESPONSE_BYTES:])
        except OSError:
            pass
        return fresh and verdict != b"\x01" and closed_by_peer(sock)


def stalled_client(address, results):
    """Says nothing; the server must hang up on its own (handshake deadline)."""
    with connect(address) as sock:
        sock.settimeout(30)
        results.append(closed_by_peer(sock))


# ---- the driver ---------------------------------------------------------------------------------

class Control:
    """The job's contact rank on the control socket (see control_channel.h)."""

    def __init__(self, listener):
        listener.settimeout(60)
        self.sock, _ = listener.accept()
        self.sock.settimeout(90)
        self.reader = self.sock.makefile("r")

    def receive(self):
        line = self.reader.readline()
        if not line:
            raise RuntimeError("the job closed the control channel")
        return line.strip()

    def send(self, line):
        self.sock.sendall((line + "\n").encode())


class Tally:
    def __init__(self):
        self.counts = {}
        self.lock = threading.Lock()

    def add(self, name, attempts, refused):
        with self.lock:
            a, r = self.counts.get(name, (0, 0))
            self.counts[name] = (a + attempts, r + refused)

    def report(self):
        for name, (attempts, refused) in sorted(self.counts.items()):
            print(f"  {name}: {attempts} attempt(s), {refused} refused")


def attack_listener(failures, tally, rank, address):
    target = f"transport listener of rank {rank} ({address})"
    checks = [
        ("transport wrong token", lambda: wrong_token(address, TRANSPORT_PURPOSE, RANKS - 1)),
        ("transport garbage", lambda: garbage(address)),
        ("transport oversized length prefix", lambda: oversized_prefix(address)),
        ("transport oversized frame after hello", lambda: oversized_after_hello(address)),
    ]
    expect_refused(failures, tally, checks, target)
    scan_both_ways(failures, tally, address, "transport", target)


def expect_refused(failures, tally, checks, target):
    """Runs each (name, attack) once; every attack must be refused by `target`."""
    for name, attack in checks:
        refused = attack()
        tally.add(name, 1, int(refused))
        failures.expect(refused, f"{name} was not refused by the {target}")


def scan_both_ways(failures, tally, address, kind, target):
    """A port scanner's connects (closed politely, then reset): every one must still be
    accepted, i.e. the listener survived what came before."""
    for reset in (False, True):
        count = RESETS_PER_ROUND if reset else SCANS_PER_ROUND
        made = scan(address, count, reset)
        name = f"{kind} scanner (connect/reset)" if reset else f"{kind} scanner (connect/close)"
        tally.add(name, count, made)
        failures.expect(made == count, f"{name}: only {made} of {count} connects reached the "
                                       f"{target}; is it still listening?")


def record_and_replay(failures, tally, control, upstream, command, expected_reply, name):
    proxy = RecordingProxy(upstream)
    control.send(f"{command} {proxy.address}")
    reply = control.receive()
    failures.expect(reply == expected_reply, f"{name}: the genuine session said {reply!r}, "
                                             f"expected {expected_reply!r}")
    client_sent, server_sent = proxy.wait()
    failures.expect(len(client_sent) >= HELLO_BYTES + RESPONSE_BYTES,
                    f"{name}: recorded only {len(client_sent)} bytes")
    for _ in range(3):
        refused = replay(upstream, client_sent, server_sent)
        tally.add(name, 1, int(refused))
        failures.expect(refused, f"{name} was not refused by {upstream}")
    return client_sent, server_sent


def attack_store_rounds(failures, tally, store, store_recording, stalled_threads, done):
    """Attack rounds until at least STORE_ROUNDS are done and the server has hung up on every
    stalled client (about its 10 s handshake deadline), so the job computes under attack that
    long."""
    rounds = 0
    while rounds < STORE_ROUNDS or any(thread.is_alive() for thread in stalled_threads):
        expect_refused(failures, tally, [
            ("store wrong token", lambda: wrong_token(store, STORE_PURPOSE, 0)),
            ("store replayed session", lambda: replay(store, *store_recording)),
            ("store garbage", lambda: garbage(store)),
            ("store oversized length prefix", lambda: oversized_prefix(store)),
            ("store oversized frame after hello", lambda: oversized_after_hello(store)),
        ], f"store at {store}")
        scan_both_ways(failures, tally, store, "store", f"store at {store}")
        rounds += 1
    done.set()


def bootstrap_window(failures, tally, control, job, token, attack):
    store = control.receive().split()[1]
    listeners = {}
    while True:
        line = control.receive().split()
        if line[0] == "ready":
            break
        listeners[int(line[1])] = line[2]
    print(f"store at {store}; transport listeners {listeners}", flush=True)
    failures.expect(sorted(listeners) == list(range(RANKS - 1)), f"listeners {listeners}")

    ranks = check_token_exposure(failures, job.process.pid, token, "bootstrap window")
    sockets = listening_sockets([job.process.pid] + ranks)
    print(f"listening sockets of the job (pid, ip, port): {sockets}", flush=True)
    for pid, ip, port in sockets:
        failures.expect(ip == "127.0.0.1", f"pid {pid} listens on {ip}:{port}, not 127.0.0.1")
    ports = {port for _, _, port in sockets}
    for address in [store] + list(listeners.values()):
        failures.expect(int(address.rsplit(":", 1)[1]) in ports,
                        f"{address} is not among the job's listening sockets")
    if not attack:
        return store, listeners, None

    for rank, address in sorted(listeners.items()):
        attack_listener(failures, tally, rank, address)
    record_and_replay(failures, tally, control, listeners[1], "record-transport",
                      "recorded-transport 1", "transport replayed handshake")
    store_recording = record_and_replay(failures, tally, control, store, "record-store",
                                        "recorded-store 1", "store replayed session")
    return store, listeners, store_recording


def run(args):
    failures = Failures()
    tally = Tally()
    directory = scratch_directory()
    token, token_path = token_file(directory)
    control_path = os.path.join(directory, "control.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(control_path)
    listener.listen(1)
    env = job_environment({"CHORUS_BACKEND": "tcp", "CHORUS_LOG_LEVEL": "trace",
                           "SECURITY_CONTROL_SOCKET": control_path})
    started = time.monotonic()
    job = Job([args.chorusrun, "-np", str(RANKS), "--timeout", "60", "--token-file", token_path,
               args.job, "attacked"], env)
    try:
        attack_job(args, failures, tally, job, listener, token, started)
    except (RuntimeError, OSError) as error:
        failures.expect(False, f"the driver lost the job: {error!r}")
        print(f"chorusrun exited {job.wait(30)}")
    finally:
        if job.process.poll() is None:
            job.process.kill()
    tally.report()
    failures.exit("attack_running_job")


def attack_job(args, failures, tally, job, listener, token, started):
    control = Control(listener)
    store, listeners, store_recording = bootstrap_window(failures, tally, control, job, token,
                                                         not args.no_attack)
    stalled, stalled_threads = [], []
    attacks_done = threading.Event()
    if args.no_attack:
        attacks_done.set()
    else:
        stalled_threads = [threading.Thread(target=stalled_client, args=(store, stalled))
                           for _ in range(STALLED_CLIENTS)]
        for thread in stalled_threads:
            thread.start()
    stalled_transport = []
    if not args.no_attack:
        stalled_transport = [connect(address) for address in listeners.values()
                             for _ in range(STALLED_PER_LISTENER)]
    go = time.monotonic()
    control.send("go")
    failures.expect(control.receive() == "joined", "the contact rank did not join")
    joined = time.monotonic() - go
    print(f"the mesh connected {joined:.2f} s after go", flush=True)
    failures.expect(joined < HANDSHAKE_DEADLINE - 1,
                    f"the mesh took {joined:.1f} s to connect: silent clients held up the "
                    "transport listeners' accept loops")
    for sock in stalled_transport:
        failures.expect(closed_by_peer(sock), "a silent client of a transport listener was not "
                                              "cut off once the mesh was connected")
        sock.close()
    attacker = None
    if not args.no_attack:
        attacker = threading.Thread(target=attack_store_rounds,
                                    args=(failures, tally, store, store_recording,
                                          stalled_threads, attacks_done))
        attacker.start()
        for rank, address in sorted(listeners.items()):
            made = scan(address, 1, False)
            failures.expect(made == 0, f"rank {rank}'s transport listener {address} is still "
                                       "open after the mesh was connected")
    attacks_done.wait(180)
    failures.expect(attacks_done.is_set(), "the store attacks did not finish in time")
    failures.expect(job.process.poll() is None, "the job ended before the attacks did")
    control.send("stop")
    code = job.wait(120)
    elapsed = time.monotonic() - started
    for thread in stalled_threads + ([attacker] if attacker else []):
        thread.join(60)
    iterations = [line for line in job.lines if "security_job: OK" in line]
    failures.expect(len(stalled) == len(stalled_threads) and all(stalled),
                    f"stalled store clients hung up on by the server: {stalled}")
    output = job.output()
    failures.expect(code == 0, f"the attacked job exited {code}")
    failures.expect(f"security_job: OK on {RANKS} ranks" in output, "the job did not report OK")
    failures.expect(token not in output, "the job token appeared in the job's output")
    if not args.no_attack:
        failures.expect("the TCP store refused a connection" in output,
                        "the store logged no refusal (were its logs captured?)")
    print(f"job took {elapsed:.1f} s ({'no attack' if args.no_attack else 'under attack'}): "
          + (iterations[0].strip() if iterations else "no result"))
    print(f"(the store logged {job.quieted} refused connections; not shown)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chorusrun", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--no-attack", action="store_true",
                        help="run the same job unattacked (for timing)")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
