#include <algorithm>
#include <sstream>

#include "chorus/dist_context.h"
#include "connector/slurm.h"
#include "core/check.h"
#include "core/env.h"

namespace chorus {
namespace {

// The first of the variables that is set, else `fallback`.
int firstInt(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    if (auto value = env::integer(name))
      return static_cast<int>(*value);
  }
  return fallback;
}

// mpirun's placement, read from its environment (no MPI call) so that config() is right before any
// communicator exists: Open MPI's OMPI_COMM_WORLD_*, else MPICH/Hydra's PMI_RANK / PMI_SIZE. Only
// where the connector would choose MPI (no CHORUS_STORE, no torchrun-style RANK).
[[maybe_unused]] void applyMpirunPlacement(DistConfig& config) {
  if (env::string("CHORUS_STORE") || env::string("RANK"))
    return;
  auto rank = env::integer("OMPI_COMM_WORLD_RANK");
  auto size = env::integer("OMPI_COMM_WORLD_SIZE");
  auto localRank = env::integer("OMPI_COMM_WORLD_LOCAL_RANK");
  auto localSize = env::integer("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!rank || !size) {
    rank = env::integer("PMI_RANK");
    size = env::integer("PMI_SIZE");
    localRank = env::integer("MPI_LOCALRANKID");
    localSize = env::integer("MPI_LOCALNRANKS");
  }
  if (!rank || !size || *size < 1 || *rank < 0 || *rank >= *size)
    return;
  config.rank = static_cast<int>(*rank);
  config.size = static_cast<int>(*size);
  config.localRank = static_cast<int>(localRank.value_or(*rank));
  config.localSize = static_cast<int>(localSize.value_or(*size));
}

// "cpu", or "cuda:" and a decimal ordinal.
bool isDeviceName(const std::string& name) {
  if (name == "cpu")
    return true;
  const std::string prefix = "cuda:";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.size() > prefix.size() + 6)
    return false;
  return std::all_of(name.begin() + prefix.size(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

DistConfig DistConfig::fromEnvironment() {
  DistConfig config;
  config.rank = firstInt({"CHORUS_RANK", "RANK"}, 0);
  config.size = firstInt({"CHORUS_SIZE", "WORLD_SIZE"}, 1);
  config.localRank = firstInt({"CHORUS_LOCAL_RANK", "LOCAL_RANK"}, config.rank);
  config.localSize = firstInt({"CHORUS_LOCAL_SIZE", "LOCAL_WORLD_SIZE"}, config.size);
  config.nodeRank = firstInt({"CHORUS_NODE_RANK", "GROUP_RANK"}, 0);
#ifdef CHORUS_WITH_MPI
  applyMpirunPlacement(config);  // the MPI connector serves processes started by mpirun
#endif
  // srun's tasks (Note [Slurm bootstrap]), where no launcher of chorus's or torchrun's set more.
  if (!env::string("CHORUS_STORE") && !env::string("RANK") && connector::launchedBySrun()) {
    const connector::Placement slurm = connector::slurmPlacement();
    config.rank = slurm.rank;
    config.size = slurm.size;
    config.localRank = slurm.localRank;
    config.localSize = slurm.localSize;
    config.nodeRank = slurm.nodeRank;
  }
  CHORUS_CHECK_ARG(config.size >= 1 && config.rank >= 0 && config.rank < config.size,
                   "the environment gives rank ", config.rank, " in a job of size ", config.size);
  config.rootRank = 0;
  if (auto value = env::integer("CHORUS_ENABLE_DATA_PARALLEL"))
    config.enableDataParallel = *value;
  if (auto value = env::integer("CHORUS_ZERO_OPT_LEVEL")) {
    CHORUS_CHECK_ARG(*value >= 0 && *value <= 3, "CHORUS_ZERO_OPT_LEVEL must be 0, 1, 2 or 3, not ",
                     *value);
    config.zeroOptLevel = static_cast<int>(*value);
  }
  if (auto value = env::integer("CHORUS_BUCKET_MB")) {
    CHORUS_CHECK_ARG(*value > 0, "CHORUS_BUCKET_MB must be positive, not ", *value);
    config.bucketBytes = static_cast<size_t>(*value) << 20;
  }
  if (auto value = env::seconds("CHORUS_TIMEOUT")) {
    CHORUS_CHECK_ARG(value->count() > 0, "CHORUS_TIMEOUT must be a positive number of seconds");
    config.timeout = *value;
  }
  if (auto value = env::string("CHORUS_BACKEND"))
    config.backend = *value;
  config.device = "cuda:" + std::to_string(config.localRank);
  if (auto value = env::string("CHORUS_DEVICE")) {
    CHORUS_CHECK_ARG(isDeviceName(*value),
                     "CHORUS_DEVICE must be 'cpu' or 'cuda:N' (N >= 0), not '", *value, "'");
    config.device = *value;
  }
  return config;
}

std::string DistConfig::dumps() const {
  std::ostringstream out;
  out << "root_rank: " << rootRank << "\n"
      << "rank: " << rank << "\n"
      << "size: " << size << "\n"
      << "local_rank: " << localRank << "\n"
      << "local_size: " << localSize << "\n"
      << "node_rank: " << nodeRank << "\n"
      << "enable_data_parallel: " << (enableDataParallel ? "true" : "false") << "\n"
      << "zero_opt_level: " << zeroOptLevel << "\n"
      << "bucket_mb: " << (bucketBytes >> 20) << "\n"
      << "timeout_s: " << timeout.count() / 1000.0 << "\n"
      << "backend: " << backend << "\n"
      << "device: " << device << "\n";
  return out.str();
}

}  // namespace chorus
