"""The timeline end to end (Note [Timeline]): chorusrun runs traced_job.py on 4 ranks; the merged
trace must be valid JSON with every rank's events, sequence numbers that agree across the ranks of
each group, and `chorus-trace summary` must blame the rank that was late on purpose. Recording is
off by default and changes no result.

    CHORUSRUN=<build>/bin/chorusrun CHORUS_TRACE_TOOL=<build>/bin/chorus-trace \
        PYTHONPATH=<build>/python /usr/bin/python3 -m pytest test_trace_job.py
"""

import json
import os
import shlex
import socket
import subprocess
from collections import defaultdict

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "traced_job.py")
CHORUSRUN = os.environ.get("CHORUSRUN", "chorusrun")
MPIRUN = os.environ.get("MPIRUN")  # set where chorus is built with MPI (the mpi backend's test)
TRACE_TOOL = os.environ.get("CHORUS_TRACE_TOOL", "chorus-trace")
RANKS = 4
SLOW_RANK = 2
SLOW_S = 0.05  # traced_job.py's sleep before each world allreduce
JOB_DEADLINE_S = 180


def run_job(tmp_path, mode, trace_env, **extra_env):
    path = tmp_path / "trace.json"
    env = dict(os.environ, CHORUS_TIMEOUT="60", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path),
               **extra_env)
    env.pop("CHORUS_TRACE", None)
    if trace_env:
        env["CHORUS_TRACE"] = str(path)
    done = subprocess.run([CHORUSRUN, "-np", str(RANKS), "/usr/bin/python3", JOB, mode, str(path)],
                          env=env, capture_output=True, text=True, timeout=JOB_DEADLINE_S)
    report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, report
    for rank in range(RANKS):
        assert f"RESULT rank={rank} ok" in done.stdout, report
    return path, done


def collectives_by_rank(events):
    """{rank: [(group, seq, op), ...]} of the collectives (seq > 0), in start order."""
    found = defaultdict(list)
    for event in sorted(events, key=lambda e: e.get("ts", 0)):
        if event.get("cat") == "operation" and event["args"]["seq"] > 0:
            found[event["pid"]].append((event["args"]["group"], event["args"]["seq"],
                                        event["args"]["op"]))
    return found


def check_trace(path, allreduces_on_world, backend="shm"):
    with open(path) as stream:
        trace = json.load(stream)  # valid JSON, or the test fails here
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {rank: f"rank {rank}" for rank in range(RANKS)}
    for event in events:
        if event["ph"] == "X":  # complete events: balanced by construction, never negative
            assert event["dur"] >= 0 and event["ts"] > 0, event
    found = collectives_by_rank(events)
    world = f"group [0, 1, 2, 3] ({backend})"
    for rank in range(RANKS):
        ops = found[rank]
        on_world = [seq for group, seq, op in ops if group == world and op == "allreduce"]
        assert len(on_world) == allreduces_on_world, ops
        half = [op for group, _, op in ops if group != world]
        assert half == ["allreduce"] * 3, ops
    # The ranks of one group numbered its collectives alike.
    by_group = defaultdict(dict)
    for rank, ops in found.items():
        for group, seq, op in ops:
            by_group[group].setdefault(rank, []).append((seq, op))
    for group, ranks in by_group.items():
        sequences = list(ranks.values())
        assert all(s == sequences[0] for s in sequences), (group, ranks)
    assert len(by_group) == 3  # the world and two halves
    return events


def test_chorus_trace_records_the_job_and_blames_the_late_rank(tmp_path):
    path, done = run_job(tmp_path, "env", trace_env=True)
    assert f"chorusrun: trace of {RANKS} ranks written to {path}" in done.stderr, done.stderr
    assert not list(tmp_path.glob("trace.json.rank*.part"))  # merged and removed
    events = check_trace(path, allreduces_on_world=10)
    sends = [e for e in events if e["name"] in ("send to 1", "recv from 0")]
    assert sorted(e["pid"] for e in sends) == [0, 1]
    # The shm backend notes when each rank saw its last peer arrive: the others waited about
    # SLOW_S for the late rank at every world allreduce, the late rank hardly at all.
    waited = check_the_late_rank_is_blamed(path, events, "group [0, 1, 2, 3] (shm)")
    # Arriving last, it found every peer there at its first look (at least once): the shm backend
    # then records a wait of exactly 0, without reading the clock.
    assert min(waited[SLOW_RANK]) == 0, waited[SLOW_RANK]


def check_the_late_rank_is_blamed(path, events, world):
    """The backend noted when each rank saw its last peer arrive: at the median world allreduce
    the others waited about SLOW_S for the late rank, the late rank hardly at all; and
    `chorus-trace summary` blames the late rank first. Returns {rank: [seconds waited]}."""
    waited = defaultdict(list)
    for event in events:
        args = event.get("args", {})
        if args.get("op") == "allreduce" and args.get("group") == world:
            waited[event["pid"]].append(args["peers_arrived_after_us"] / 1e6)
    assert sorted(waited) == list(range(RANKS)), waited
    for rank in range(RANKS):
        median = sorted(waited[rank])[len(waited[rank]) // 2]
        if rank == SLOW_RANK:
            assert median < SLOW_S / 2, (rank, waited[rank])
        else:
            assert median >= SLOW_S / 2, (rank, waited[rank])
    summary = subprocess.run([TRACE_TOOL, "summary", str(path)], capture_output=True, text=True,
                             timeout=60)
    assert summary.returncode == 0, summary.stderr
    first = summary.stdout.splitlines()[0]
    assert first.startswith(f"rank {SLOW_RANK} made the others wait longest"), summary.stdout
    return waited


@pytest.mark.skipif(not MPIRUN, reason="chorus is built without MPI (MPIRUN not set)")
def test_mpi_backend_notes_when_every_peer_arrived(tmp_path):
    """Under mpirun with the native mpi backend, the fingerprint agreement (an allreduce, which
    completes only when every rank has joined) notes the arrivals: the others waited about SLOW_S
    for the late rank, the late rank hardly at all, and the summary blames it."""
    path = tmp_path / "trace.json"
    env = dict(os.environ, CHORUS_TIMEOUT="60", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path),
               CHORUS_BACKEND="mpi")
    env.pop("CHORUS_TRACE", None)
    loopback = ("--allow-run-as-root --oversubscribe --mca btl self,vader --mca oob_tcp_if_include "
                "lo --mca btl_tcp_if_include lo")
    command = [MPIRUN, *shlex.split(loopback), "-np", str(RANKS), "-x", "CHORUS_BACKEND",
               "-x", "CHORUS_TIMEOUT", "-x", "PYTHONPATH", "-x", "TMPDIR",
               "/usr/bin/python3", JOB, "api", str(path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True,
                          timeout=JOB_DEADLINE_S)
    report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, report
    with open(path) as stream:  # rank 0 merged it when recording() ended
        events = json.load(stream)["traceEvents"]
    check_the_late_rank_is_blamed(path, events, "group [0, 1, 2, 3] (mpi)")


def test_tcp_backend_notes_when_it_heard_from_every_rank(tmp_path):
    """On the tcp backend (no arrival round), a rank notes the arrivals once its algorithm has
    heard from every rank (Note [Heard from every rank]): the others waited about SLOW_S for the
    late rank, the late rank hardly at all, and the summary blames it."""
    path, _ = run_job(tmp_path, "env", trace_env=True, CHORUS_BACKEND="tcp")
    events = check_trace(path, allreduces_on_world=10, backend="tcp")
    check_the_late_rank_is_blamed(path, events, "group [0, 1, 2, 3] (tcp)")


def test_recording_context_manager_traces_only_its_block(tmp_path):
    path, _ = run_job(tmp_path, "api", trace_env=False)
    events = check_trace(path, allreduces_on_world=10)  # the warm-up allreduce is not there
    world_seqs = {e["args"]["seq"] for e in events
                  if e.get("cat") == "operation" and e["args"]["group"].startswith("group [0, 1, 2")}
    assert 1 not in world_seqs  # allreduce #1 ran before start()


def test_recording_is_off_by_default(tmp_path):
    run_job(tmp_path, "off", trace_env=False)
    assert list(tmp_path.iterdir()) == []  # no trace, no part, no recorder directory left


def test_two_launchers_merge_once_on_node_zero(tmp_path):
    """Two chorusrun launchers on this machine act as two nodes: node 0 merges every rank's part
    (it ends after node 1), node 1 leaves its parts and says so."""
    path = tmp_path / "trace.json"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, CHORUS_TIMEOUT="60", TMPDIR=str(tmp_path), CHORUS_TRACE=str(path),
               CHORUS_JOB_TOKEN="a-token-for-two-launchers")

    def launcher(node):
        return subprocess.Popen(
            [CHORUSRUN, "--nnodes", "2", "--node-rank", str(node), "--master",
             f"127.0.0.1:{port}", "--nproc-per-node", "2", "/usr/bin/python3", JOB, "env",
             str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    nodes = [launcher(0), launcher(1)]
    try:
        outputs = [node.communicate(timeout=JOB_DEADLINE_S) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err
    assert "node 0 trace of 4 ranks written to" in outputs[0][1], outputs[0][1]
    assert "node 0 merges them" in outputs[1][1], outputs[1][1]
    with open(path) as stream:
        events = json.load(stream)["traceEvents"]
    assert {e["pid"] for e in events} == set(range(RANKS))
    assert not list(tmp_path.glob("trace.json.rank*.part"))
