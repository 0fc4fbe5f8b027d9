"""srun without srun (Note [Slurm bootstrap], src/connector/slurm.h): each test starts the tasks of
one step as processes with the variables srun would give them, as the two-launcher tests fake
nodes, and checks what chorus makes of them.

    PYTHONPATH=<build>/python /usr/bin/python3 -m pytest test_slurm.py
"""

import os
import re
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TASK = os.path.join(HERE, "slurm_task.py")
DEADLINE_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step_environment(tmp_path, nodes, per_node, token=True, step=True, node_list=None,
                     job_id="4242"):
    """The variables every task of the step shares (srun's, as faked here)."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "CHORUS_", "OMPI_", "PMI")) and
            k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}
    base.update(CHORUS_TIMEOUT="60", TMPDIR=str(tmp_path), MASTER_PORT=str(free_port()),
                SLURM_JOB_ID=job_id, SLURM_NTASKS=str(nodes * per_node),
                SLURM_TASKS_PER_NODE=f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
                SLURM_JOB_NODELIST=node_list or ",".join(["localhost"] * nodes))
    if step:
        base["SLURM_STEP_ID"] = "0"
    if token:
        base["CHORUS_JOB_TOKEN"] = "a-test-token-for-this-step"
    return base


def start_task(base, rank, per_node, *args):
    env = dict(base, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank % per_node),
               SLURM_NODEID=str(rank // per_node))
    return subprocess.Popen([sys.executable, TASK, *args], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_step(tmp_path, nodes, per_node, **step):
    """Starts nodes x per_node tasks; returns [(returncode, stdout, stderr)] by rank."""
    base = step_environment(tmp_path, nodes, per_node, **step)
    tasks = [start_task(base, rank, per_node) for rank in range(nodes * per_node)]
    results = []
    try:
        for task in tasks:
            out, err = task.communicate(timeout=DEADLINE_S)
            results.append((task.returncode, out, err))
    finally:
        for task in tasks:
            if task.poll() is None:
                task.kill()
    return results


def table(results):
    rows = {}
    for code, out, err in results:
        assert code == 0, err
        fields = dict(item.split("=") for item in re.search(r"TASK (.*)", out).group(1).split())
        rows[int(fields["rank"])] = fields
    return rows


def test_two_nodes_of_two_tasks_fill_the_seed_attribute_table(tmp_path):
    rows = table(run_step(tmp_path, nodes=2, per_node=2))
    assert sorted(rows) == [0, 1, 2, 3]
    for rank, row in rows.items():
        assert row["size"] == "4" and row["comm_size"] == "4" and row["comm_rank"] == str(rank)
        assert row["local_rank"] == row["comm_local_rank"] == str(rank % 2)
        assert row["local_size"] == row["comm_local_size"] == "2"
        assert row["root_rank"] == "0"
        assert row["backend"] == "hierarchical"  # shm inside each "node", tcp among them


def test_one_node_needs_no_token_and_leaves_no_file(tmp_path):
    rows = table(run_step(tmp_path, nodes=1, per_node=3, token=False))
    assert sorted(rows) == [0, 1, 2]
    assert all(row["backend"] == "shm" and row["local_size"] == "3" for row in rows.values())
    assert list(tmp_path.iterdir()) == []  # rank 0's token file is gone with it


def test_several_nodes_without_a_token_refuse_to_start(tmp_path):
    results = run_step(tmp_path, nodes=2, per_node=1, token=False, node_list="n[1-2]")
    for code, _, err in results:
        assert code != 0
        assert "spans several nodes, and no job token is set" in err, err
        assert "CHORUS_JOB_TOKEN" in err


def test_an_sbatch_shell_without_a_step_is_one_rank(tmp_path):
    # The batch script's own shell has SLURM_PROCID and SLURM_NTASKS but no step id.
    results = run_step(tmp_path, nodes=1, per_node=1, step=False)
    assert table(results)[0]["size"] == "1"


def test_a_task_that_joins_twice_is_refused_and_the_job_goes_on(tmp_path):
    base = step_environment(tmp_path, nodes=1, per_node=2)
    tasks = [start_task(base, rank, 2, "--hold") for rank in range(2)]
    try:
        for task in tasks:  # both connected: rank 1 is claimed
            assert task.stdout.readline().strip() == "CONNECTED"
        again = start_task(base, 1, 2)
        _, err = again.communicate(timeout=DEADLINE_S)
        assert again.returncode != 0
        assert "rank 1 (this process, node 0) joined a job whose rank 1 is already taken" in err, \
            err
        for task in tasks:
            task.stdin.write("go\n")
            task.stdin.flush()
        for task in tasks:
            out, err = task.communicate(timeout=DEADLINE_S)
            assert task.returncode == 0, err
            assert "TASK rank=" in out
    finally:
        for task in tasks:
            if task.poll() is None:
                task.kill()


def test_a_program_that_initialized_mpi_bootstraps_through_mpi(tmp_path):
    pytest.importorskip("mpi4py")
    env = dict(step_environment(tmp_path, nodes=1, per_node=2), SLURM_PROCID="0",
               SLURM_LOCALID="0", SLURM_NODEID="0", CHORUS_TIMEOUT="20")
    done = subprocess.run([sys.executable, os.path.join(HERE, "slurm_mpi_task.py")], env=env,
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 0, done.stderr
    assert "SIZE 1 " in done.stdout and "MPI 1" in done.stdout, done.stdout
