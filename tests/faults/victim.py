"""One rank of a fault-injection job (run by test_faults.py under chorusrun; see its docstring).

    chorusrun -np 3 /usr/bin/python3 victim.py SCENARIO COLLECTIVE

Every rank loops COLLECTIVE on inputs with closed-form results and checks each result. The last
rank (the victim) misbehaves as SCENARIO says; the others report how their loop ended.

Lines for the driver (one per event, flushed at once):
    START rank=R pid=P job=J            the rank is up (its pid, CHORUS_JOB_ID)
    FAULT rank=R at=T                   the victim is about to misbehave (T: time.time())
    RESULT rank=R outcome=ok|error type=NAME at=T peer=K missing=A,B message=TEXT
Only NumPy and chorus are imported, so a rank starts quickly.
"""

import os
import signal
import socket
import sys
import threading
import time

import numpy as np

import chorus

SCENARIOS = ("kill", "exit0", "raise", "close_sockets", "slow", "absent", "loop")
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "gather",
               "scatter", "all_to_all", "barrier", "sendrecv")

# Large enough that most of the loop's time is spent inside the collective (so a fault lands
# mid-collective), small enough that a healthy iteration takes milliseconds.
ELEMENTS = 1 << 18
FAULT_AFTER_S = 0.3   # how long the victim runs the loop healthily before the fault
SLOW_BY_S = 5.0       # how late the slow rank is
LOOP_FOR_S = 20.0     # a healthy loop's length: far beyond any fault's report time


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def one_step(name, rank, size, step):
    """Runs one collective on closed-form inputs and checks the result against NumPy."""
    base = np.arange(ELEMENTS, dtype=np.float64) % 251
    mine = (base + rank + step).astype(np.float32)
    everyone = [(base + r + step).astype(np.float32) for r in range(size)]
    if name == "allreduce":
        expect_equal(chorus.allreduce(mine), sum(everyone))
    elif name == "allgather":
        expect_equal(chorus.allgather(mine), np.concatenate(everyone))
    elif name == "reduce_scatter":
        block = ELEMENTS // size
        total = sum(everyone)
        expect_equal(chorus.reduce_scatter(mine[:block * size]),
                     total[rank * block:(rank + 1) * block])
    elif name == "broadcast":
        expect_equal(chorus.broadcast(mine, root=step % size), everyone[step % size])
    elif name == "reduce":
        out = chorus.reduce(mine, root=step % size)
        if rank == step % size:
            expect_equal(out, sum(everyone))
    elif name == "gather":
        out = chorus.gather(mine, root=step % size)
        if rank == step % size:
            expect_equal(out, np.concatenate(everyone))
    elif name == "scatter":
        root = step % size
        block = ELEMENTS // size
        source = everyone[root][:block * size]
        expect_equal(chorus.scatter(source, root=root), source[rank * block:(rank + 1) * block])
    elif name == "all_to_all":
        block = ELEMENTS // size
        out = chorus.all_to_all(mine[:block * size])
        expect_equal(out, np.concatenate([e[rank * block:(rank + 1) * block] for e in everyone]))
    elif name == "barrier":
        chorus.barrier()
    elif name == "sendrecv":
        right, left = (rank + 1) % size, (rank - 1) % size
        if rank % 2 == 0:
            chorus.send(mine, right)
            got = chorus.recv(left, out=np.empty_like(mine))
        else:
            got = chorus.recv(left, out=np.empty_like(mine))
            chorus.send(mine, right)
        expect_equal(got, everyone[left])
    else:
        raise SystemExit(f"unknown collective {name}; known: {', '.join(COLLECTIVES)}")


def expect_equal(got, want):
    if not np.array_equal(np.asarray(got), np.asarray(want, dtype=np.float32)):
        raise AssertionError("a collective returned a wrong result")


def close_transport_sockets():
    """Shuts down every TCP connection of this process except the one to the store: the peers see
    the connection end in the middle of a message, without a goodbye."""
    store_port = int(os.environ["CHORUS_STORE"].rsplit(":", 1)[1])
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if sock.family == socket.AF_INET and sock.getpeername()[1] != store_port:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # a listener or an unconnected socket
        finally:
            sock.close()


def misbehave_later(scenario, rank):
    def act():
        time.sleep(FAULT_AFTER_S)
        say(f"FAULT rank={rank} at={time.time():.6f}")
        if scenario == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif scenario == "close_sockets":
            close_transport_sockets()
    threading.Thread(target=act, daemon=True).start()


def report(rank, outcome, error=None):
    fields = [f"RESULT rank={rank}", f"outcome={outcome}"]
    if error is not None:
        fields.append(f"type={type(error).__name__}")
    fields.append(f"at={time.time():.6f}")
    if error is not None:
        fields.append(f"peer={getattr(error, 'peer_rank', -1)}")
        fields.append("missing=" + ",".join(map(str, getattr(error, "missing_ranks", []) or [])))
        fields.append("message=" + str(error).replace("\n", " "))
    say(" ".join(fields))


def main():
    scenario, collective = sys.argv[1], sys.argv[2]
    if scenario not in SCENARIOS:
        raise SystemExit(f"unknown scenario {scenario}; known: {', '.join(SCENARIOS)}")
    rank, size = int(os.environ["CHORUS_RANK"]), int(os.environ["CHORUS_SIZE"])
    say(f"START rank={rank} pid={os.getpid()} job={os.environ.get('CHORUS_JOB_ID', '')}")
    one_step(collective, rank, size, 0)  # every rank connected and healthy
    victim = rank == size - 1
    if victim and scenario in ("kill", "close_sockets"):
        misbehave_later(scenario, rank)
    elif victim and scenario in ("exit0", "raise"):
        time.sleep(FAULT_AFTER_S)
        say(f"FAULT rank={rank} at={time.time():.6f}")
        if scenario == "exit0":
            sys.exit(0)
        raise ValueError("the victim rank raised on purpose")
    elif victim and scenario == "absent":
        say(f"FAULT rank={rank} at={time.time():.6f}")
        time.sleep(LOOP_FOR_S * 3)  # never calls the collective; the launcher stops it
        return
    elif victim and scenario == "slow":
        say(f"FAULT rank={rank} at={time.time():.6f}")
        time.sleep(SLOW_BY_S)
    try:
        if scenario == "slow":
            for step in range(1, 4):  # the others wait SLOW_BY_S inside the first of these
                one_step(collective, rank, size, step)
        else:
            began, step = time.monotonic(), 1
            while time.monotonic() - began < LOOP_FOR_S:
                one_step(collective, rank, size, step)
                step += 1
    except chorus.Error as error:
        report(rank, "error", error)
        sys.exit(1)
    report(rank, "ok")


if __name__ == "__main__":
    main()
