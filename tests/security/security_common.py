"""Shared pieces of the security test drivers (standard library only).

- The client side of the chorus handshake (Note [Authenticated handshake],
  src/core/net/handshake.h), so an attacker can try a wrong token.
- A one-connection man-in-the-middle proxy that records what the client sent.
- /proc helpers: a process tree, its listening TCP sockets, command lines and
  environments.
- Starting chorusrun with a token file whose token the test knows.
"""

import atexit
import hashlib
import hmac
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading

MAGIC = b"CHORUSH1"
HELLO_BYTES = 40      # magic + client nonce
CHALLENGE_BYTES = 72  # server nonce + server id + server MAC
RESPONSE_BYTES = 40   # client id + client MAC
IO_TIMEOUT = 15.0     # seconds any single attacker read may wait


class Failures:
    """Collects failed expectations so one run reports all of them."""

    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def expect(self, ok, message):
        if not ok:
            with self.lock:
                self.items.append(message)
            print("FAILED: " + message, flush=True)
        return ok

    def exit(self, name):
        if self.items:
            print(f"{name}: {len(self.items)} failure(s)", flush=True)
            sys.exit(1)
        print(f"{name}: OK", flush=True)
        sys.exit(0)


def recv_exactly(sock, count):
    """Up to `count` bytes; fewer only if the peer closed or reset the connection."""
    data = b""
    while len(data) < count:
        try:
            chunk = sock.recv(count - len(data))
        except (ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        data += chunk
    return data


def closed_by_peer(sock):
    """True when the peer closes the connection (EOF or reset) without sending anything more."""
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def connect(address):
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT)
    sock.settimeout(IO_TIMEOUT)
    return sock


def mac(token, label, purpose, first, second, ident):
    message = label + purpose.encode() + first + second + ident.to_bytes(8, "little")
    return hmac.new(token.encode(), message, hashlib.sha256).digest()


def handshake_with_token(address, token, purpose, client_id):
    """Runs the client side of the handshake. Returns (verdict, server_proof_ok): verdict is the
    server's byte (1 accepted, 0 refused) or None when it closed the connection instead."""
    with connect(address) as sock:
        client_nonce = os.urandom(32)
        sock.sendall(MAGIC + client_nonce)
        challenge = recv_exactly(sock, CHALLENGE_BYTES)
        if len(challenge) < CHALLENGE_BYTES:
            return None, False
        server_nonce, server_id, server_mac = challenge[:32], challenge[32:40], challenge[40:]
        expected = mac(token, b"server", purpose, client_nonce, server_nonce,
                       int.from_bytes(server_id, "little"))
        server_ok = hmac.compare_digest(expected, server_mac)
        proof = mac(token, b"client", purpose, server_nonce, client_nonce, client_id)
        try:
            sock.sendall(client_id.to_bytes(8, "little") + proof)
        except (ConnectionResetError, BrokenPipeError):
            return None, server_ok
        verdict = recv_exactly(sock, 1)
        return (verdict[0] if verdict else None), server_ok


class RecordingProxy:
    """Forwards one connection to `upstream`, recording each direction's bytes."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.listener.settimeout(60)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.client_sent = bytearray()
        self.server_sent = bytearray()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _pump(self, source, sink, record):
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                record.extend(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _run(self):
        client, _ = self.listener.accept()
        server = connect(self.upstream)
        client.settimeout(None)
        server.settimeout(None)
        back = threading.Thread(target=self._pump, args=(server, client, self.server_sent))
        back.start()
        self._pump(client, server, self.client_sent)
        back.join(IO_TIMEOUT)
        client.close()
        server.close()

    def wait(self):
        self.thread.join(60)
        self.listener.close()
        return bytes(self.client_sent), bytes(self.server_sent)


# ---- /proc --------------------------------------------------------------------------------------

def descendants(pid):
    """pid's children, grandchildren, ... (via /proc/<pid>/task/*/children)."""
    found = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                continue
            for child in children:
                if child not in found:
                    found.append(child)
                    stack.append(child)
    return found


def _listening_inodes():
    """inode -> (ip, port) for every listening TCP socket in this network namespace."""
    inodes = {}
    for table, family in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6)):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], int(fields[9])
            if state != "0A":  # TCP_LISTEN
                continue
            host, port = local.split(":")
            if family == 4:
                ip = socket.inet_ntop(socket.AF_INET, bytes.fromhex(host)[::-1])
            else:
                raw = bytes.fromhex(host)
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                ip = socket.inet_ntop(socket.AF_INET6, words)
            inodes[inode] = (ip, int(port, 16))
    return inodes


def listening_sockets(pids):
    """[(pid, ip, port)] for every listening TCP socket the processes hold."""
    inodes = _listening_inodes()
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inode = int(target[len("socket:["):-1])
                if inode in inodes:
                    found.append((pid, *inodes[inode]))
    return found


def read_proc(pid, name):
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def check_token_exposure(failures, launcher_pid, token, context):
    """The token is in no command line of the launcher or its descendants, not in the launcher's
    environment (it came from a file), and where it is in a rank's environment, that file is
    readable by its owner only. Returns the rank pids seen."""
    ranks = descendants(launcher_pid)
    failures.expect(len(ranks) > 0, f"{context}: no rank processes under chorusrun")
    secret = token.encode()
    for pid in [launcher_pid] + ranks:
        cmdline = read_proc(pid, "cmdline")
        failures.expect(cmdline != b"", f"{context}: could not read /proc/{pid}/cmdline")
        failures.expect(secret not in cmdline, f"{context}: token in /proc/{pid}/cmdline")
    failures.expect(secret not in read_proc(launcher_pid, "environ"),
                    f"{context}: token in chorusrun's environment (it was given a token file)")
    for pid in ranks:
        info = os.stat(f"/proc/{pid}/environ")
        failures.expect(stat.S_IMODE(info.st_mode) & 0o077 == 0,
                        f"{context}: /proc/{pid}/environ is readable by group or others "
                        f"(mode {oct(stat.S_IMODE(info.st_mode))})")
        failures.expect(info.st_uid == os.stat(f"/proc/{pid}").st_uid,
                        f"{context}: /proc/{pid}/environ is not owned by the rank's user")
    return ranks


# ---- launching ----------------------------------------------------------------------------------

def job_environment(extra):
    """This environment without inherited launch variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CHORUS_") and k not in
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)
    return env


def token_file(directory):
    """A fresh token in a mode-0600 file; returns (token, path)."""
    token = secrets.token_hex(32)
    path = os.path.join(directory, "token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, path


class Job:
    """A chorusrun process whose combined output is collected by a thread."""

    # Lines not echoed (counted instead): the store's log of each refused connection, thousands of
    # them when it is attacked.
    QUIET = "the TCP store refused a connection"

    def __init__(self, argv, env):
        self.quieted = 0
        self.process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if self.QUIET in line:
                self.quieted += 1
                continue
            sys.stdout.write("  | " + line)
            sys.stdout.flush()

    def wait(self, timeout):
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
            self.lines.append(f"(killed after {timeout} s)\n")
        self.reader.join(10)
        return code

    def output(self):
        return "".join(self.lines)


def scratch_directory():
    """A fresh private directory, removed (token file included) when the driver exits."""
    directory = tempfile.mkdtemp(prefix="chorus-security-")
    atexit.register(shutil.rmtree, directory, True)
    return directory
