#!/usr/bin/python3
"""Checks chorusrun's bind rules (Note [Bind address], src/connector/bind_address.h), on loopback
only:

  - one node, default: ranks are told CHORUS_BIND_ADDR=127.0.0.1 and run;
  - --bind 127.0.0.1 and CHORUS_IFNAME=lo: the same, on one node and on two nodes (two launchers),
    and with -H, where CHORUS_IFNAME reaches the remote launchers on their command line (the
    stand-in for ssh, tests/launcher/fake_ssh.sh, is run without CHORUS_IFNAME in its environment);
  - CHORUS_IFNAME naming no interface, --bind with an address that is not this host's, and --bind
    with something that is not an IPv4 address: chorusrun refuses at once, naming this host's
    addresses;
  - a wildcard --master (0.0.0.0) without an explicit --bind 0.0.0.0 is refused, and so is a
    wildcard MASTER_ADDR for torchrun-style launching.
(That a running job's listening sockets are all on 127.0.0.1 is checked by attack_running_job.py.)
"""

import argparse
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from security_common import (  # noqa: E402
    Failures, Job, job_environment, scratch_directory, token_file)

JOB_TIMEOUT = 60


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def foreign_address():
    """An IPv4 address (from TEST-NET-1, 192.0.2.0/24) that this host cannot bind."""
    for last in range(254, 0, -1):
        candidate = f"192.0.2.{last}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((candidate, 0))
            except OSError:
                return candidate
    raise RuntimeError("every address of 192.0.2.0/24 is on this host")


def launch(args, launcher_args, extra_env=None, mode="collectives"):
    env = job_environment({"CHORUS_BACKEND": "tcp", **(extra_env or {})})
    return Job([args.chorusrun, "--timeout", "30"] + launcher_args + [args.job, mode], env)


def expect_runs_bound_to_loopback(failures, name, job, ranks):
    code = job.wait(JOB_TIMEOUT)
    output = job.output()
    failures.expect(code == 0, f"{name}: exited {code}")
    failures.expect(output.count("bind=127.0.0.1") == ranks,
                    f"{name}: expected {ranks} ranks told CHORUS_BIND_ADDR=127.0.0.1")
    failures.expect("security_job: OK" in output, f"{name}: the job did not report OK")


def expect_refused(failures, name, job, *phrases):
    code = job.wait(JOB_TIMEOUT)
    output = job.output()
    failures.expect(code != 0, f"{name}: was not refused")
    for phrase in phrases:
        failures.expect(phrase in output, f"{name}: the message lacks {phrase!r}")
    failures.expect("security_job: OK" not in output, f"{name}: the job ran anyway")


def two_nodes(args, failures, name, bind_args, extra_env):
    directory = scratch_directory()
    _, token_path = token_file(directory)
    master = f"127.0.0.1:{free_port()}"
    common = ["--nnodes", "2", "--master", master, "--nproc-per-node", "2",
              "--token-file", token_path] + bind_args
    nodes = [launch(args, common + ["--node-rank", str(node)], extra_env) for node in (0, 1)]
    codes = [node.wait(JOB_TIMEOUT) for node in nodes]
    output = "".join(node.output() for node in nodes)
    failures.expect(codes == [0, 0], f"{name}: launchers exited {codes}")
    failures.expect(output.count("bind=127.0.0.1") == 4,
                    f"{name}: expected 4 ranks told CHORUS_BIND_ADDR=127.0.0.1")
    failures.expect("security_job: OK on 4 ranks" in output, f"{name}: the job did not report OK")


def host_list(args, failures):
    """-H a:2,b:2 through fake_ssh.sh, CHORUS_IFNAME=lo on the coordinator only."""
    fake_ssh = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launcher",
                            "fake_ssh.sh")
    env = {"CHORUS_IFNAME": "lo",
           "CHORUS_RSH": f"env -u CHORUS_IFNAME /bin/sh {os.path.abspath(fake_ssh)}",
           "PATH": os.path.dirname(os.path.abspath(args.chorusrun)) + ":" + os.environ["PATH"]}
    job = launch(args, ["-H", "a:2,b:2", "--master", f"127.0.0.1:{free_port()}"], env)
    expect_runs_bound_to_loopback(failures, "-H with CHORUS_IFNAME=lo", job, 4)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chorusrun", required=True)
    parser.add_argument("--job", required=True)
    args = parser.parse_args()
    failures = Failures()

    expect_runs_bound_to_loopback(failures, "default", launch(args, ["-np", "3"]), 3)
    expect_runs_bound_to_loopback(failures, "--bind 127.0.0.1",
                                  launch(args, ["-np", "3", "--bind", "127.0.0.1"]), 3)
    expect_runs_bound_to_loopback(failures, "CHORUS_IFNAME=lo",
                                  launch(args, ["-np", "3"], {"CHORUS_IFNAME": "lo"}), 3)
    two_nodes(args, failures, "two nodes with --bind 127.0.0.1", ["--bind", "127.0.0.1"], {})
    two_nodes(args, failures, "two nodes with CHORUS_IFNAME=lo", [], {"CHORUS_IFNAME": "lo"})
    host_list(args, failures)

    expect_refused(failures, "unknown interface",
                   launch(args, ["-np", "2"], {"CHORUS_IFNAME": "nosuchif0"}),
                   "CHORUS_IFNAME=nosuchif0 names no network interface", "lo 127.0.0.1")
    foreign = foreign_address()
    expect_refused(failures, "address not on this host",
                   launch(args, ["-np", "2", "--bind", foreign]),
                   f"--bind {foreign} is not an address of this host", "lo 127.0.0.1")
    expect_refused(failures, "not an address", launch(args, ["-np", "2", "--bind", "eth0"]),
                   "--bind eth0 is not an IPv4 address")
    directory = scratch_directory()
    _, token_path = token_file(directory)
    expect_refused(failures, "wildcard --master",
                   launch(args, ["--nnodes", "2", "--node-rank", "0", "--master",
                                 f"0.0.0.0:{free_port()}", "--nproc-per-node", "1",
                                 "--token-file", token_path]),
                   "would serve the store on every interface", "--bind 0.0.0.0")
    torchrun = Job([args.job, "collectives"],
                   job_environment({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "0.0.0.0",
                                    "MASTER_PORT": str(free_port())}))
    expect_refused(failures, "wildcard MASTER_ADDR", torchrun,
                   "MASTER_ADDR=0.0.0.0 would make rank 0 serve the store on every interface")
    failures.exit("bind_rules")


if __name__ == "__main__":
    main()
