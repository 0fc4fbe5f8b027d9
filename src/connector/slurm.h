// Slurm: a program started by `srun` bootstraps with no launcher of chorus's (issue 25).
//
// Note [Slurm bootstrap]
// srun starts every task itself and tells each where it stands: SLURM_PROCID (rank),
// SLURM_NTASKS (size), SLURM_LOCALID (local rank), SLURM_NODEID (node), SLURM_TASKS_PER_NODE
// (local sizes, compressed: "4(x2),3") and SLURM_JOB_NODELIST (hosts, compressed:
// "node[01-04,07]"). chorus reads those (launchedBySrun: SLURM_PROCID with a step id, so an
// sbatch script's own shell, which has SLURM_PROCID but no step, stays a single rank). Rank 0
// serves the rendezvous store on the first host of the node list, at MASTER_PORT if set, else at a
// port derived from the job and step ids (slurmStorePort); the others connect there.
// The token that authenticates every connection comes from CHORUS_JOB_TOKEN or
// CHORUS_JOB_TOKEN_FILE (export it in the sbatch script, or keep a 0600 file in the job's shared
// directory). There is no default token: without one, a job on several nodes refuses to start,
// saying how to give one. On one node, rank 0 draws a token and leaves it in a 0600 file in
// $TMPDIR (or /tmp) named by the job and step, where the other tasks of that node read it, as
// chorusrun does for its ranks. Under `srun --mpi=pmix` a program that already initialized MPI
// (mpi4py, say) still bootstraps through MPI (connector.cc).
#pragma once

#include <string>
#include <vector>

#include "connector/store_connector.h"

namespace chorus::connector {

// Expands a Slurm host list: "node[01-04,07],gpu3,r[1-2]n[1-2]" -> node01 node02 node03 node04
// node07 gpu3 r1n1 r1n2 r2n1 r2n2 (zero padding kept, ranges in order, several bracket groups in
// one name multiplied out). Malformed lists are InvalidArgumentError quoting them.
std::vector<std::string> expandHostList(const std::string& list);

// Expands SLURM_TASKS_PER_NODE: "4(x2),3" -> 4 4 3. Malformed: InvalidArgumentError.
std::vector<int> expandTasksPerNode(const std::string& spec);

// Whether this process is a task of an srun step (see the note).
bool launchedBySrun();

// This task's place in the job, from Slurm's variables (see the note).
Placement slurmPlacement();

// The store's port when MASTER_PORT is not set: 20000 + (job id * 8 + step id) mod 20000, the
// same on every task of a step and different for the steps of one job that run in turn.
int slurmStorePort(long long jobId, long long stepId);

}  // namespace chorus::connector
