"""soak.py: runs soak_rank.py jobs in many configurations and reports what went wrong.

    soak.py --build BUILD [--seconds N]            every configuration, about N seconds in all
    soak.py --build BUILD --slice [--seconds 60]   the bounded slice that ctest runs
    soak.py --build BUILD --config NAME --seed S [--seconds T]   one configuration again
    soak.py --list                                 the configuration names

A configuration is a launcher, a backend, a rank count and what runs beside it:
    shm-4, tcp-8, mpi-3      chorusrun -np N (CHORUS_BACKEND=shm|tcp); mpirun -np N (CHORUS_BACKEND=mpi)
    hier-2x2                 two `chorusrun --nnodes 2 --node-rank I --master 127.0.0.1:PORT
                             --nproc-per-node 2` launchers on this machine (hierarchical backend)
    +hog                     two busy-looping processes beside the job, for its whole length
    +delayD                  CHORUS_FAULT_DELAY_MS=D: every transport message held 0..D ms
    +kill                    one random rank SIGKILLs itself at a random step; every survivor must
                             raise a chorus.Error naming it within 5 s (a PeerError by its
                             peer_rank, any other error in its message)

Every rank runs the same seeded random program (soak_rank.py) and checks every result against a
closed form. The table has, per configuration: jobs, operations (steps, counted once per rank),
bytes (input bytes over all ranks), wrong results, hangs (a job still running at its deadline:
its whole process group is killed), false errors (any error in a job without a fault; in a kill
job, a survivor whose error does not name the victim, comes 5 s or more after the kill, or never
comes), and faults named correctly (survivors that named the victim in time, of all survivors).

Exit status: 0 when there is no wrong result, hang or false error and every fault was named
correctly; 1 otherwise. The slice and full runs print their seed and, per job, the command that
runs it again. SOAK_SEED overrides the seed (default: the slice uses SLICE_SEED, fixed; a full run
the current time).
"""

import argparse
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_PROGRAM = os.path.join(HERE, "soak_rank.py")
PYTHON = "/usr/bin/python3"
REPORT_WITHIN_S = 5.0
MPI_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader", "--mca",
             "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"]
LINE = re.compile(r"^(?:\[\d+\] )?(SOAK-[A-Z]+) (.*)$")


# --------------------------------------------------------------------------- configurations


class Config:
    """One row of the table: how to launch the job and what to inject."""

    def __init__(self, name):
        self.name = name
        base, *extras = name.split("+")
        kind, _, count = base.partition("-")
        self.kind = kind  # shm, tcp, mpi, hier
        if kind == "hier":
            nodes, _, per_node = count.partition("x")
            self.nodes, self.per_node = int(nodes), int(per_node)
            self.ranks = self.nodes * self.per_node
        else:
            self.nodes, self.per_node, self.ranks = 1, int(count), int(count)
        self.hog = "hog" in extras
        self.kill = "kill" in extras
        self.delay_ms = 0
        for extra in extras:
            if extra.startswith("delay"):
                self.delay_ms = int(extra[len("delay"):])
            elif extra not in ("hog", "kill"):
                raise SystemExit(f"soak: unknown part {extra!r} of configuration {name!r}")
        if kind not in ("shm", "tcp", "mpi", "hier"):
            raise SystemExit(f"soak: unknown configuration {name!r}")


FULL = (
    [f"{b}-{n}" for b in ("shm", "tcp", "mpi") for n in (2, 3, 4, 8)]
    + ["hier-2x1", "hier-2x2", "hier-2x4"]
    + ["shm-4+hog", "shm-8+hog", "tcp-3+hog", "mpi-4+hog", "hier-2x2+hog"]
    + ["tcp-2+delay5", "tcp-4+delay3", "tcp-8+delay2", "shm-4+delay5", "hier-2x2+delay3",
       "tcp-4+delay3+hog"]
    + ["shm-2+kill", "shm-3+kill", "shm-4+kill", "shm-8+kill", "tcp-3+kill", "tcp-4+kill",
       "hier-2x2+kill", "tcp-4+delay3+kill", "shm-4+hog+kill", "tcp-8+kill"]
)

# The slice (ctest): a fixed set, one from each family (shm beside a CPU hog, tcp with transport
# delays, mpi, hierarchical over two launchers, a killed rank, 8 ranks), with a fixed seed, so
# that `make test` runs the same programs every time. `make soak` runs every configuration with a
# new seed each run.
SLICE = ["shm-4+hog", "tcp-4+delay3", "mpi-3", "hier-2x2", "shm-4+kill", "tcp-8"]
SLICE_SEED = 16


def config_seed(seed, name):
    return (seed * 1000003 + zlib.crc32(name.encode())) % (1 << 31)


# --------------------------------------------------------------------------- one job


class Job:
    """What one job printed, and how it ended."""

    def __init__(self, config, seed):
        self.config = config
        self.seed = seed
        self.lines = []
        self.hung = False
        self.codes = []
        self.command = ""
        self.wall = 0.0

    def events(self, kind):
        found = []
        for line in self.lines:
            m = LINE.match(line)
            if m and m.group(1) == kind:
                found.append(parse_fields(m.group(2)))
        return found


def parse_fields(text):
    """key=value pairs up to "message=", which takes the rest of the line."""
    head, _, message = text.partition(" message=")
    fields = {}
    for item in head.split():
        key, _, value = item.partition("=")
        fields[key] = value
    if message:
        fields["message"] = message
    return fields


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_environment(build, config):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.path.join(build, "python")
    env["PYTHONUNBUFFERED"] = "1"
    env["CHORUS_TIMEOUT"] = "60"  # far above the 5 s a dead peer must be reported in
    env["OMP_NUM_THREADS"] = "1"
    if config.kind in ("shm", "tcp", "mpi"):
        env["CHORUS_BACKEND"] = config.kind
    if config.delay_ms:
        env["CHORUS_FAULT_DELAY_MS"] = str(config.delay_ms)
    return env


def rank_arguments(config, seed, seconds, slice_mode):
    args = ["--seed", str(seed), "--seconds", f"{seconds:g}"]
    big = 16 << 20
    if config.ranks >= 8 or config.hog or config.delay_ms:
        big = 4 << 20  # bounded memory and time where everything is already slow
    if slice_mode:
        big = min(big, 2 << 20 if config.ranks < 8 else 512 << 10)
        args += ["--big-fraction", "0.005"]
    args += ["--max-bytes", str(big)]
    if config.kill:
        rng = random.Random(seed)
        args += ["--kill-rank", str(rng.randrange(config.ranks)),
                 "--kill-step", str(rng.randint(3, 120 if config.ranks < 8 else 40))]
    return args


def commands(build, config, rank_args):
    """The command lines (one per launcher) and a printable form."""
    chorusrun = os.path.join(build, "bin", "chorusrun")
    program = [PYTHON, RANK_PROGRAM] + rank_args
    if config.kind in ("shm", "tcp"):
        return [[chorusrun, "-np", str(config.ranks)] + program]
    if config.kind == "mpi":
        mpirun = shutil.which("mpirun") or "mpirun"
        exported = []
        for name in ("CHORUS_BACKEND", "CHORUS_TIMEOUT", "CHORUS_FAULT_DELAY_MS", "PYTHONPATH",
                     "PYTHONUNBUFFERED", "OMP_NUM_THREADS"):
            exported += ["-x", name]
        return [[mpirun] + MPI_FLAGS + exported + ["-np", str(config.ranks)] + program]
    port = free_port()
    return [[chorusrun, "--nnodes", str(config.nodes), "--node-rank", str(node), "--master",
             f"127.0.0.1:{port}", "--nproc-per-node", str(config.per_node)] + program
            for node in range(config.nodes)]


def start_hog():
    return [subprocess.Popen([PYTHON, "-c", "while True: pass"], start_new_session=True)
            for _ in range(2)]


def stop(processes):
    for p in processes:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in processes:
        p.wait()


def run_job(build, config, seed, seconds, slice_mode, log_dir):
    job = Job(config, seed)
    rank_args = rank_arguments(config, seed, seconds, slice_mode)
    env = job_environment(build, config)
    if config.kind == "hier":
        env["CHORUS_JOB_TOKEN"] = secrets.token_hex(16)
    cmds = commands(build, config, rank_args)
    shown_env = " ".join(f"{k}={env[k]}" for k in ("CHORUS_BACKEND", "CHORUS_TIMEOUT",
                                                    "CHORUS_FAULT_DELAY_MS") if k in env)
    job.command = " & ".join(f"PYTHONPATH={env['PYTHONPATH']} {shown_env} " + " ".join(c)
                             for c in cmds)
    # Startup (imports, rendezvous) is slow on an oversubscribed 2-core machine: be generous.
    deadline = 120 + 3 * seconds + 10 * config.ranks
    hogs = start_hog() if config.hog else []
    logs = [open(os.path.join(log_dir, f"{config.name}.{seed}.{i}.log"), "w+")
            for i in range(len(cmds))]
    began = time.monotonic()
    procs = [subprocess.Popen(c, env=env, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
             for c, log in zip(cmds, logs)]
    try:
        for p in procs:
            try:
                job.codes.append(p.wait(timeout=max(0.1, began + deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                job.hung = True
                break
    finally:
        job.wall = time.monotonic() - began
        stop(procs)
        stop(hogs)
    for log in logs:
        log.seek(0)
        job.lines += log.read().splitlines()
        log.close()
    return job


# --------------------------------------------------------------------------- judging


class Row:
    def __init__(self, name):
        self.name = name
        self.jobs = self.ops = self.bytes = self.wrong = self.hangs = self.false_errors = 0
        self.named = self.survivors = 0
        self.seconds = 0.0
        self.problems = []


def judge(job, row):
    """Adds one job's counts to its row; returns a list of problem descriptions."""
    config = job.config
    problems = []
    row.jobs += 1
    row.seconds += job.wall
    summaries = {int(s["rank"]): s for s in job.events("SOAK-SUMMARY")}
    errors = {}
    for e in job.events("SOAK-ERROR"):
        errors.setdefault(int(e["rank"]), e)
    terms = {int(t["rank"]): t for t in job.events("SOAK-TERM")}
    wrong_lines = job.events("SOAK-WRONG")
    counted = 0
    for s in summaries.values():
        row.ops = max(row.ops, 0)
        counted = max(counted, int(s["ops"]))
        row.bytes += int(s["bytes"])
        row.wrong += int(s["wrong"])
    row.ops += counted
    if not summaries:  # a job that ended in an error: count the steps reached
        steps = [int(e["step"]) for e in errors.values()] + [0]
        row.ops += max(steps)
    if wrong_lines and not summaries:
        row.wrong += len(wrong_lines)
    for w in wrong_lines[:10]:
        problems.append("WRONG " + " ".join(f"{k}={v}" for k, v in w.items()))
    if job.hung:
        row.hangs += 1
        problems.append(f"HANG: still running after {job.wall:.0f} s; killed")
    kills = job.events("SOAK-KILL")
    if config.kill:
        problems += judge_kill(job, row, kills, summaries, errors, terms)
    else:
        for rank, e in sorted(errors.items()):
            row.false_errors += 1
            problems.append(f"FALSE ERROR rank {rank} step {e['step']}: {e.get('type')}: "
                            f"{e.get('message', '')[:600]}")
        missing = [r for r in range(config.ranks) if r not in summaries and r not in errors]
        if missing and not job.hung:
            row.false_errors += len(missing)
            problems.append(f"FALSE ERROR ranks {missing} ended without a summary or an error "
                            f"(exit codes {job.codes})")
    if problems:
        tail = [line for line in job.lines if "SOAK-STEP" not in line][-15:]
        problems.append("last output:\n      " + "\n      ".join(tail))
    return problems


def judge_kill(job, row, kills, summaries, errors, terms):
    problems = []
    if not kills:
        if not job.hung:
            problems.append("the victim never reached its kill step")
            row.false_errors += 1
        return problems
    victim, killed_at = int(kills[0]["rank"]), float(kills[0]["t"])
    for rank in range(job.config.ranks):
        if rank == victim:
            continue
        row.survivors += 1
        e = errors.get(rank)
        if e is None:
            row.false_errors += 1
            why = ("stopped by the launcher first (SIGTERM at "
                   f"+{float(terms[rank]['t']) - killed_at:.2f} s)" if rank in terms else
                   "finished normally" if rank in summaries else "reported nothing")
            problems.append(f"FAULT NOT NAMED rank {rank}: {why}")
            continue
        delay = float(e["t"]) - killed_at
        message = e.get("message", "")
        # A PeerError names the failed process in peer_rank (a world rank, whichever group, step
        # or forwarding rank it came through: Note [One rank numbering]); another error must name
        # it in its message.
        if e.get("type") == "PeerError":
            names = e.get("peer") == str(victim)
        else:
            names = re.search(rf"\brank {victim}\b", message) is not None
        if names and delay < REPORT_WITHIN_S:
            row.named += 1
        else:
            row.false_errors += 1
            what = "does not name the victim" if not names else f"came {delay:.2f} s after"
            problems.append(f"FAULT NOT NAMED rank {rank} (victim {victim}): {what}: "
                            f"{e.get('type')}: {message[:600]}")
    return problems


def print_table(rows):
    header = (f"{'configuration':<20} {'jobs':>4} {'ops':>8} {'bytes':>10} {'wrong':>5} "
              f"{'hangs':>5} {'false err':>9} {'faults named':>12} {'seconds':>7}")
    print(header)
    print("-" * len(header))
    for r in rows:
        named = f"{r.named}/{r.survivors}" if r.survivors else "-"
        print(f"{r.name:<20} {r.jobs:>4} {r.ops:>8} {human(r.bytes):>10} {r.wrong:>5} "
              f"{r.hangs:>5} {r.false_errors:>9} {named:>12} {r.seconds:>7.0f}")
    sys.stdout.flush()


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def row_failed(r):
    return r.wrong or r.hangs or r.false_errors or r.named != r.survivors


# --------------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    parser.add_argument("--seconds", type=float, default=None,
                        help="in all (default 600; the slice 60); with --config, per job")
    parser.add_argument("--slice", action="store_true")
    parser.add_argument("--config", action="append", default=[],
                        help="run only these configurations (repeatable)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--logs", default=None, help="keep every job's output in this folder")
    args = parser.parse_args()
    if args.list:
        print("\n".join(FULL))
        return 0
    build = os.path.abspath(args.build)
    if not os.path.exists(os.path.join(build, "bin", "chorusrun")):
        raise SystemExit(f"soak: {build}/bin/chorusrun does not exist; build first (make)")
    seed = args.seed
    if seed is None and os.environ.get("SOAK_SEED"):
        seed = int(os.environ["SOAK_SEED"])
    if seed is None:
        seed = SLICE_SEED if args.slice else int(time.time())
    total = args.seconds if args.seconds is not None else (60 if args.slice else 600)
    have_mpi = shutil.which("mpirun") is not None

    if args.config:
        names = args.config
    elif args.slice:
        names = list(SLICE)
    else:
        names = list(FULL)
    configs = [Config(n) for n in names]
    skipped = [c.name for c in configs if c.kind == "mpi" and not have_mpi]
    configs = [c for c in configs if c.name not in skipped]
    if args.config:
        per_job = total
    else:
        # Each job also spends a few seconds starting (imports, rendezvous); kill jobs end early.
        startup = 4.0 if args.slice else 6.0
        per_job = max(3.0, min(60.0, total / len(configs) - startup))
    log_dir = args.logs or os.path.join(build, "soak-logs")
    os.makedirs(log_dir, exist_ok=True)
    for name in os.listdir(log_dir):  # the previous run's
        if name.endswith(".log"):
            os.remove(os.path.join(log_dir, name))
    where = f" ({', '.join(skipped)} skipped: no mpirun)" if skipped else ""
    print(f"soak: seed {seed}, {len(configs)} configurations, {per_job:.0f} s of operations per "
          f"job, about {total:.0f} s in all{where}; logs in {log_dir}", flush=True)
    rows = {c.name: Row(c.name) for c in configs}
    began = time.monotonic()
    round_index = 0
    while True:
        for config in configs:
            if round_index > 0 and time.monotonic() - began + per_job + 10 > total:
                break
            job_seed = config_seed(seed + round_index, config.name)
            print(f"soak: {config.name} seed {job_seed}: rerun with: {PYTHON} {__file__} "
                  f"--build {build} --config {config.name} --seed {seed + round_index} "
                  f"--seconds {per_job:g}", flush=True)
            job = run_job(build, config, job_seed, per_job, args.slice, log_dir)
            problems = judge(job, rows[config.name])
            status = "FAILED" if problems else "ok"
            print(f"soak:   {status} in {job.wall:.1f} s", flush=True)
            for p in problems:
                print(f"    {p}", flush=True)
            if problems:
                print(f"    command: {job.command}", flush=True)
        round_index += 1
        if args.config or args.slice or time.monotonic() - began + per_job + 10 > total:
            break
    print()
    print_table(rows.values())
    failed = [r.name for r in rows.values() if row_failed(r)]
    if failed:
        print(f"soak: FAILED in {', '.join(failed)} (seed {seed})")
        return 1
    print(f"soak: PASSED ({sum(r.jobs for r in rows.values())} jobs, seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
