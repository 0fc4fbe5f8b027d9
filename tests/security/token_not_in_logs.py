#!/usr/bin/python3
"""Checks that the job token never reaches a job's output, even at the most verbose log level
(CHORUS_LOG_LEVEL=trace) and when the job goes wrong: a rank that fails (the others see a
PeerError) and a rank that stops calling collectives (the others time out). The token comes from
a mode-0600 --token-file, so this test knows it. (Command lines and environments of a running job
are checked by attack_running_job.py, while its ranks are held in their bootstrap window.)

Also: a rank reading its token from CHORUS_JOB_TOKEN_FILE (torchrun-style launching) refuses a
file that group or others can read, and accepts a mode-0600 one.
"""

import argparse
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from security_common import (  # noqa: E402
    Failures, Job, job_environment, scratch_directory, token_file)


def run_job(args, failures, name, mode, timeout, expected_phrases):
    directory = scratch_directory()
    token, token_path = token_file(directory)
    env = job_environment({"CHORUS_BACKEND": "tcp", "CHORUS_LOG_LEVEL": "trace"})
    job = Job([args.chorusrun, "-np", "3", "--timeout", str(timeout), "--token-file", token_path,
               args.job, mode], env)
    code = job.wait(120)
    output = job.output()
    failures.expect(code != 0, f"{name}: the job should have failed, exited {code}")
    for phrase in expected_phrases:
        failures.expect(phrase in output, f"{name}: the output lacks {phrase!r}")
    failures.expect(token not in output, f"{name}: the job token appeared in the output")
    failures.expect(token[:16] not in output and token[-16:] not in output,
                    f"{name}: part of the job token appeared in the output")


def token_file_modes(args, failures):
    directory = scratch_directory()
    token, path = token_file(directory)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = job_environment({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(port), "CHORUS_JOB_TOKEN_FILE": path,
                           "CHORUS_LOG_LEVEL": "trace"})
    os.chmod(path, 0o644)
    job = Job([args.job, "collectives"], env)
    code = job.wait(60)
    failures.expect(code != 0, "a group-readable CHORUS_JOB_TOKEN_FILE was accepted")
    failures.expect("chmod 600" in job.output(), "the refusal does not say to chmod 600")
    failures.expect(token not in job.output(), "the token appeared in the refusal")
    os.chmod(path, 0o600)
    job = Job([args.job, "collectives"], env)
    code = job.wait(60)
    failures.expect(code == 0 and "security_job: OK on 1 ranks" in job.output(),
                    f"a mode-0600 CHORUS_JOB_TOKEN_FILE was not accepted (exit {code})")
    failures.expect(token not in job.output(), "the token appeared in the output")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chorusrun", required=True)
    parser.add_argument("--job", required=True)
    args = parser.parse_args()
    failures = Failures()
    run_job(args, failures, "failing rank", "fail", 30, ["fails on purpose"])
    run_job(args, failures, "timed-out collective", "timeout", 3, ["timed out"])
    token_file_modes(args, failures)
    failures.exit("token_not_in_logs")


if __name__ == "__main__":
    main()
