// See Note [Slurm bootstrap] (slurm.h).
#include "connector/slurm.h"

#include <cctype>

#include "core/check.h"
#include "core/env.h"

namespace chorus::connector {
namespace {

// Splits `text` at the commas outside brackets.
std::vector<std::string> splitTopLevel(const std::string& text, const std::string& whole) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '[')
      ++depth;
    if (c == ']')
      --depth;
    CHORUS_CHECK_ARG(depth >= 0 && depth <= 1, "the Slurm host list '", whole,
                     "' has unbalanced brackets");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  CHORUS_CHECK_ARG(depth == 0, "the Slurm host list '", whole, "' has unbalanced brackets");
  parts.push_back(current);
  return parts;
}

// "01-04,07" -> 01 02 03 04 07, with each range's zero padding.
std::vector<std::string> expandRanges(const std::string& inside, const std::string& whole) {
  std::vector<std::string> values;
  size_t start = 0;
  while (start <= inside.size()) {
    size_t comma = inside.find(',', start);
    if (comma == std::string::npos)
      comma = inside.size();
    const std::string item = inside.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string low = item.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : item.substr(dash + 1);
    const auto digits = [](const std::string& s) {
      return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    };
    CHORUS_CHECK_ARG(digits(low) && digits(high) && std::stoll(low) <= std::stoll(high),
                     "the Slurm host list '", whole, "' has a bad range '", item, "'");
    for (long long n = std::stoll(low); n <= std::stoll(high); ++n) {
      std::string value = std::to_string(n);
      if (value.size() < low.size())
        value.insert(0, low.size() - value.size(), '0');
      values.push_back(value);
    }
    start = comma + 1;
  }
  return values;
}

// One name with any number of bracket groups: "r[1-2]n[1-2]".
std::vector<std::string> expandName(const std::string& name, const std::string& whole) {
  const size_t open = name.find('[');
  if (open == std::string::npos)
    return {name};
  const size_t close = name.find(']', open);
  CHORUS_CHECK_ARG(close != std::string::npos, "the Slurm host list '", whole,
                   "' has unbalanced brackets");
  std::vector<std::string> names;
  for (const std::string& middle : expandRanges(name.substr(open + 1, close - open - 1), whole)) {
    for (const std::string& rest : expandName(name.substr(close + 1), whole))
      names.push_back(name.substr(0, open) + middle + rest);
  }
  return names;
}

int requiredSlurmInt(const char* name) {
  const auto value = env::integer(name);
  CHORUS_CHECK_ARG(value.has_value(), "this process runs under srun, but ", name,
                   " is not set; chorus needs SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and "
                   "SLURM_NODEID");
  return static_cast<int>(*value);
}

}  // namespace

std::vector<std::string> expandHostList(const std::string& list) {
  CHORUS_CHECK_ARG(!list.empty(), "the Slurm host list is empty");
  std::vector<std::string> hosts;
  for (const std::string& part : splitTopLevel(list, list)) {
    CHORUS_CHECK_ARG(!part.empty(), "the Slurm host list '", list, "' has an empty name");
    for (std::string& host : expandName(part, list)) hosts.push_back(std::move(host));
  }
  return hosts;
}

std::vector<int> expandTasksPerNode(const std::string& spec) {
  std::vector<int> tasks;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos)
      comma = spec.size();
    const std::string item = spec.substr(start, comma - start);
    const size_t paren = item.find("(x");
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      CHORUS_CHECK_ARG(item.back() == ')', "SLURM_TASKS_PER_NODE='", spec, "' is malformed");
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    const auto digits = [](const std::string& s) {
      return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    };
    CHORUS_CHECK_ARG(digits(count) && digits(repeat), "SLURM_TASKS_PER_NODE='", spec,
                     "' is malformed");
    for (int i = 0; i < std::stoi(repeat); ++i) tasks.push_back(std::stoi(count));
    start = comma + 1;
  }
  return tasks;
}

bool launchedBySrun() {
  return env::string("SLURM_PROCID") && env::string("SLURM_NTASKS") &&
         (env::string("SLURM_STEP_ID") || env::string("SLURM_STEPID"));
}

Placement slurmPlacement() {
  Placement placement;
  placement.rank = requiredSlurmInt("SLURM_PROCID");
  placement.size = requiredSlurmInt("SLURM_NTASKS");
  CHORUS_CHECK_ARG(placement.size >= 1 && placement.rank >= 0 && placement.rank < placement.size,
                   "SLURM_PROCID=", placement.rank,
                   " is not a rank of SLURM_NTASKS=", placement.size);
  placement.localRank = requiredSlurmInt("SLURM_LOCALID");
  placement.nodeRank = requiredSlurmInt("SLURM_NODEID");
  placement.nodeId = "node" + std::to_string(placement.nodeRank);
  placement.localSize = placement.size;
  if (const auto spec = env::string("SLURM_TASKS_PER_NODE")) {
    const std::vector<int> tasks = expandTasksPerNode(*spec);
    CHORUS_CHECK_ARG(placement.nodeRank >= 0 && placement.nodeRank < static_cast<int>(tasks.size()),
                     "SLURM_NODEID=", placement.nodeRank, " has no entry in SLURM_TASKS_PER_NODE='",
                     *spec, "'");
    placement.localSize = tasks[placement.nodeRank];
  }
  CHORUS_CHECK_ARG(placement.localRank >= 0 && placement.localRank < placement.localSize,
                   "SLURM_LOCALID=", placement.localRank, " is not a local rank of a node with ",
                   placement.localSize, " tasks");
  return placement;
}

int slurmStorePort(long long jobId, long long stepId) {
  return 20000 + static_cast<int>((jobId * 8 + stepId) % 20000);
}

}  // namespace chorus::connector
