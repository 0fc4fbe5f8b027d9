"""two_nodes.py: runs a program as ranks on simulated nodes of this machine (2 x 2 by default).

    two_nodes.py torchrun  PROGRAM [ARGS...]
    two_nodes.py chorusrun CHORUSRUN PROGRAM [ARGS...]
    two_nodes.py ranks N0,N1,... PROGRAM [ARGS...]

torchrun: starts the 4 ranks itself with torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and CHORUS_NODE_RANK = rank // 2, so ranks 0, 1 are
node 0 and ranks 2, 3 node 1. ranks: the same with uneven nodes, node k holding the next Nk ranks
(torchrun is "ranks 2,2"; chorusrun needs the same count on every node). chorusrun: starts two launchers, `chorusrun --nnodes 2 --node-rank I
--master 127.0.0.1:PORT --nproc-per-node 2 PROGRAM`, with one CHORUS_JOB_TOKEN; exits 77 (ctest
SKIP_RETURN_CODE) when this chorusrun does not support several nodes yet.
Every process is killed after DEADLINE seconds. Prints "two_nodes: PASSED" when all exit 0.
"""

import os
import secrets
import socket
import subprocess
import sys
import time

DEADLINE = 90
SKIP = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_environment():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CHORUS_") or k in ("CHORUS_TIMEOUT", "CHORUS_BACKEND")}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT"):
        env.pop(k, None)
    env["CHORUS_JOB_TOKEN"] = secrets.token_hex(16)
    env.setdefault("CHORUS_TIMEOUT", "60")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_all(procs):
    """Exit statuses of `procs`; kills them all if any is still running at the deadline."""
    end = time.monotonic() + DEADLINE
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print(f"two_nodes: FAILED, still running after {DEADLINE} s; killed", flush=True)
            return None
    return codes


def run_ranks(per_node, program):
    env, port = clean_environment(), free_port()
    size = sum(per_node)
    procs = []
    rank = 0
    for node, count in enumerate(per_node):
        for local in range(count):
            rank_env = dict(env, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(local),
                            LOCAL_WORLD_SIZE=str(count), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port), CHORUS_NODE_RANK=str(node))
            procs.append(subprocess.Popen(program, env=rank_env))
            rank += 1
    return wait_all(procs)


def supports_nodes(chorusrun):
    help_text = subprocess.run([chorusrun, "--help"], capture_output=True, text=True,
                               timeout=30).stdout
    return "--node-rank" in help_text and "--master" in help_text


def run_chorusrun(chorusrun, program):
    if not supports_nodes(chorusrun):
        print("two_nodes: SKIPPED, this chorusrun has no --node-rank/--master (multi-node "
              "launching not built yet)", flush=True)
        sys.exit(SKIP)
    env, port = clean_environment(), free_port()
    procs = [subprocess.Popen([chorusrun, "--nnodes", "2", "--node-rank", str(node), "--master",
                               f"127.0.0.1:{port}", "--nproc-per-node", "2", *program], env=env)
             for node in range(2)]
    return wait_all(procs)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("torchrun", "chorusrun", "ranks"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "torchrun":
        codes = run_ranks([2, 2], sys.argv[2:])
    elif sys.argv[1] == "ranks":
        codes = run_ranks([int(n) for n in sys.argv[2].split(",")], sys.argv[3:])
    else:
        codes = run_chorusrun(sys.argv[2], sys.argv[3:])
    if codes is None:
        return 1
    if any(codes):
        print(f"two_nodes: FAILED, exit statuses {codes}", flush=True)
        return 1
    print("two_nodes: PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
