"""Fault injection with real processes: chorusrun starts 3 ranks of victim.py, the last rank (the
victim) misbehaves, and the test checks what the user would see.

Run by ctest (tests/faults/CMakeLists.txt) as
    CHORUSRUN=<build>/bin/chorusrun PYTHONPATH=<build>/python /usr/bin/python3 -m pytest test_faults.py

For every fault, the checks are the issue's promises:
  - every surviving rank raises a chorus error naming the failed rank, within seconds of the fault
    (CHORUS_TIMEOUT is 60 s, so a report that waited for the timeout fails the bound);
  - chorusrun exits non-zero and ends with exactly one line of its own ("chorusrun: ..."), then
    where each rank stood, from the ranks' flight records (Note [Flight recorder]): the survivors
    in the operation that failed, the victim without a record;
  - no rank process, no /dev/shm segment of the job and no temporary file is left behind (each job
    gets an empty TMPDIR of its own, which must still be empty afterwards).
"""

import os
import re
import signal
import subprocess
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
VICTIM = os.path.join(HERE, "victim.py")
CHORUSRUN = os.environ.get("CHORUSRUN", "chorusrun")
PYTHON = "/usr/bin/python3"
RANKS = 3
VICTIM_RANK = RANKS - 1
TIMEOUT_S = 60          # CHORUS_TIMEOUT for every job but the "absent" one
REPORT_WITHIN_S = 5.0   # how soon after the fault the survivors must have raised
JOB_DEADLINE_S = 120    # the whole chorusrun, fault or not

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "gather",
               "scatter", "all_to_all", "barrier", "sendrecv")
BACKENDS = ("shm", "tcp")


class Job:
    """A finished chorusrun job: exit code, parsed rank lines, chorusrun's own lines."""

    def __init__(self, returncode, out, err):
        self.returncode, self.out, self.err = returncode, out, err
        self.starts = self._events("START")
        self.faults = self._events("FAULT")
        self.results = self._events("RESULT")
        lines = [line for line in err.splitlines() if line.startswith("chorusrun:")]
        block = next((i for i, line in enumerate(lines) if "where the ranks stood" in line),
                     len(lines))
        self.launcher_lines = lines[:block]
        self.recorder_lines = lines[block + 1:]  # "chorusrun:   ranks 0 and 1: in ..."
        self.standings = {}
        for line in self.recorder_lines:
            match = re.match(r"chorusrun:   ranks? ([\d, and]+): (.*)$", line)
            assert match, line
            for rank in re.findall(r"\d+", match.group(1)):
                self.standings[int(rank)] = match.group(2)

    def _events(self, kind):
        events = {}
        for line in self.out.splitlines():
            line = re.sub(r"^\[\d+\] ", "", line)
            if not line.startswith(kind + " "):
                continue
            head, _, message = line.partition(" message=")
            fields = dict(item.split("=", 1) for item in head.split()[1:])
            if message:
                fields["message"] = message
            events[int(fields["rank"])] = fields
        return events

    def describe(self):
        return f"exit {self.returncode}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def run_job(tmp_path, scenario, collective="allreduce", backend="shm", timeout_s=TIMEOUT_S,
            signal_launcher=None, extra_env=None):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, CHORUS_BACKEND=backend, CHORUS_TIMEOUT=str(timeout_s),
               TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1", **(extra_env or {}))
    command = [CHORUSRUN, "-np", str(RANKS), PYTHON, VICTIM, scenario, collective]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        consumed = signal_launcher(process) if signal_launcher is not None else ""
        out, err = process.communicate(timeout=JOB_DEADLINE_S)
        out = consumed + out
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    job = Job(process.returncode, out, err)
    assert_nothing_left(job, tmpdir)
    return job


def assert_nothing_left(job, tmpdir):
    assert len(job.starts) == RANKS, job.describe()
    for rank, start in job.starts.items():
        pid = int(start["pid"])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                alive = VICTIM.encode() in cmdline.read()
        except OSError:
            alive = False
        assert not alive, f"rank {rank} (pid {pid}) is still running\n{job.describe()}"
    job_id = job.starts[0]["job"]
    assert job_id, job.describe()
    left = [name for name in os.listdir("/dev/shm") if f"chorus-{job_id}-" in name]
    assert left == [], f"shared-memory segments left behind: {left}"
    assert os.listdir(tmpdir) == [], f"temporary files left behind: {os.listdir(tmpdir)}"


def assert_one_launcher_line(job, pattern):
    assert len(job.launcher_lines) == 1, job.describe()
    assert re.search(pattern, job.launcher_lines[0]), job.describe()


def assert_flight_records(job, survivor_pattern, victim_pattern):
    """Every rank has a place in the flight-recorder summary: each survivor's matches
    `survivor_pattern`, the victim's `victim_pattern`."""
    assert sorted(job.standings) == list(range(RANKS)), job.describe()
    for rank in range(RANKS - 1):
        assert re.search(survivor_pattern, job.standings[rank]), job.describe()
    assert re.search(victim_pattern, job.standings[VICTIM_RANK]), job.describe()


def assert_survivors_named_the_victim(job, error_types=("PeerError",)):
    fault_at = float(job.faults[VICTIM_RANK]["at"])
    for rank in range(RANKS - 1):
        result = job.results.get(rank)
        assert result is not None, f"rank {rank} reported nothing\n{job.describe()}"
        assert result["outcome"] == "error", job.describe()
        assert result["type"] in error_types, job.describe()
        assert re.search(rf"\brank {VICTIM_RANK}\b", result["message"]), job.describe()
        delay = float(result["at"]) - fault_at
        assert delay < REPORT_WITHIN_S, f"rank {rank} took {delay:.2f} s\n{job.describe()}"
        print(f"rank {rank}: {result['type']} {delay * 1000:.0f} ms after the fault")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_rank_killed_mid_collective(tmp_path, collective, backend):
    job = run_job(tmp_path, "kill", collective, backend)
    assert job.returncode == 128 + signal.SIGKILL, job.describe()
    assert_survivors_named_the_victim(job)
    assert_one_launcher_line(job, rf"^chorusrun: rank {VICTIM_RANK} was killed by signal 9 "
                                  r"\(SIGKILL\)")
    # The survivors wrote where they stood; the killed rank could not.
    assert_flight_records(job, r"^in (?!no operation)",
                          r"^no flight record \(rank \d was killed by signal 9 \(SIGKILL\)\)$")


@pytest.mark.parametrize("backend", BACKENDS)
def test_rank_exits_with_status_0_early(tmp_path, backend):
    job = run_job(tmp_path, "exit0", "allreduce", backend)
    assert job.returncode != 0, job.describe()
    assert_survivors_named_the_victim(job)
    assert_one_launcher_line(job, rf"rank {VICTIM_RANK} exited with code 0")


@pytest.mark.parametrize("backend", BACKENDS)
def test_rank_raises_in_python(tmp_path, backend):
    job = run_job(tmp_path, "raise", "allreduce", backend)
    assert job.returncode == 1, job.describe()
    assert_survivors_named_the_victim(job)
    for rank in range(RANKS - 1):
        assert "ValueError: the victim rank raised on purpose" in job.results[rank]["message"]
    assert "Traceback" in job.err and "ValueError" in job.err, job.describe()
    assert_one_launcher_line(job, rf"rank {VICTIM_RANK} exited with code 1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_to_the_launcher_stops_every_rank(tmp_path, backend):
    def terminate_once_started(process):
        lines = []
        for line in process.stdout:
            lines.append(line)
            if sum("START rank=" in seen for seen in lines) == RANKS:
                break
        time.sleep(0.5)  # let the ranks get into their loop; not a correctness wait
        process.send_signal(signal.SIGTERM)
        return "".join(lines)

    job = run_job(tmp_path, "loop", "allreduce", backend, signal_launcher=terminate_once_started)
    assert job.returncode == 128 + signal.SIGTERM, job.describe()
    assert_one_launcher_line(job, r"got SIGTERM; forwarding it to all ranks")


@pytest.mark.parametrize("backend", BACKENDS)
def test_slow_rank_five_seconds_late_succeeds_and_the_stall_is_reported(tmp_path, backend):
    job = run_job(tmp_path, "slow", "allreduce", backend, extra_env={"CHORUS_STALL_WARN": "2"})
    assert job.returncode == 0, job.describe()
    assert job.launcher_lines == [], job.describe()
    for rank in range(RANKS):
        assert job.results[rank]["outcome"] == "ok", job.describe()
    waited = float(job.results[0]["at"]) - float(job.faults[VICTIM_RANK]["at"])
    assert waited >= 4.5, f"the others did not wait for the slow rank ({waited:.2f} s)"
    # The stall inspector: each waiting rank warns once, naming the operation and the late rank.
    for rank in range(RANKS - 1):
        warnings = [line for line in job.err.splitlines()
                    if f"[chorus rank {rank}] warn:" in line and "has waited" in line]
        assert len(warnings) == 1, job.describe()
        assert re.search(r"allreduce #2 \(float32 x 262144, sum\) has waited 2\.\d s; "
                         rf"still waiting for rank {VICTIM_RANK} \(CHORUS_STALL_WARN=2\)",
                         warnings[0]), warnings[0]
    assert not any(f"[chorus rank {VICTIM_RANK}] warn:" in line for line in job.err.splitlines())


@pytest.mark.parametrize("backend", BACKENDS)
def test_rank_that_never_calls_is_named_after_the_timeout(tmp_path, backend):
    timeout_s = 3
    job = run_job(tmp_path, "absent", "allreduce", backend, timeout_s=timeout_s)
    assert job.returncode == 1, job.describe()
    fault_at = float(job.faults[VICTIM_RANK]["at"])
    for rank in range(RANKS - 1):
        result = job.results[rank]
        assert result["type"] == "TimeoutError", job.describe()
        assert result["missing"] == str(VICTIM_RANK), job.describe()
        assert re.search(r"allreduce #\d+ \(float32 x 262144, sum\) timed out after 3\.\d s "
                         rf"waiting for rank {VICTIM_RANK};", result["message"]), job.describe()
        delay = float(result["at"]) - fault_at
        assert timeout_s - 0.5 <= delay < timeout_s + REPORT_WITHIN_S, job.describe()
    assert_one_launcher_line(job, r"^chorusrun: rank [01] exited with code 1")
    # The waiting ranks stood in the allreduce the absent rank never called; it has no record.
    assert_flight_records(job, r"^in allreduce #\d+ \(float32 x 262144, sum; 1\.0 MiB\) on group "
                               r"\[0, 1, 2\] \(\w+\); last finished ", r"^no flight record")


def test_peer_closes_its_sockets_mid_message(tmp_path):
    job = run_job(tmp_path, "close_sockets", "allreduce", "tcp")
    assert job.returncode != 0, job.describe()
    assert_survivors_named_the_victim(job)
    assert_one_launcher_line(job, r"^chorusrun: rank \d exited with code 1")
