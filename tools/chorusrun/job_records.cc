// See job_records.h.
#include "job_records.h"

#include <stdlib.h>

#include <filesystem>
#include <vector>

#include "core/check.h"
#include "core/env.h"
#include "trace/flight_record.h"
#include "trace/timeline.h"

namespace chorus::launcher {

JobRecords::JobRecords() {
  if (auto named = env::string("CHORUS_RECORDER_DIR"); named && !named->empty()) {
    directory_ = *named;
    std::error_code error;
    std::filesystem::create_directories(directory_, error);
    return;
  }
  const std::string base = env::string("TMPDIR").value_or("/tmp");
  std::string pattern = base + "/chorus-recorder-XXXXXX";
  CHORUS_SYSCHECK(::mkdtemp(pattern.data()) == nullptr ? -1 : 0);
  directory_ = pattern;
  made_ = true;
}

JobRecords::~JobRecords() {
  if (made_) {
    std::error_code error;
    std::filesystem::remove_all(directory_, error);
  }
}

std::vector<std::string> JobRecords::failureSummary(
    int size, const std::map<int, std::string>& endings) const {
  const std::map<int, std::string> standings = trace::readStandings(directory_);
  if (standings.empty())
    return {};  // no rank got to write one: nothing failed inside chorus
  std::vector<std::string> lines{"where the ranks stood (flight recorder):"};
  for (const std::string& line : trace::summarizeStandings(standings, size, endings))
    lines.push_back("  " + line);
  return lines;
}

std::string JobRecords::mergeTimeline(int nodeRank) const {
  const auto path = env::string("CHORUS_TRACE");
  if (!path || path->empty())
    return "";
  if (nodeRank != 0)
    return "this node's trace parts are next to " + *path + "; node 0 merges them";
  try {
    const int parts = trace::mergeParts(*path);
    if (parts == 0)
      return "CHORUS_TRACE=" + *path + ": no rank wrote a part of the trace";
    return "trace of " + std::to_string(parts) + (parts == 1 ? " rank" : " ranks") +
           " written to " + *path;
  } catch (const std::exception& error) {
    return error.what();
  }
}

}  // namespace chorus::launcher
