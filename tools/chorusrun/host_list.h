// Host lists for `chorusrun -H` and `--hostfile`: which hosts get a launcher, and how many ranks
// (slots) each runs.
//
//   -H host1:4,host2:4         comma-separated; "host" alone means 1 slot
//   hostfile, one host a line:
//     node1 slots=4            Open MPI style (max_slots=... is accepted and ignored)
//     node1:4                  MPICH style
//     node1                    1 slot
//   '#' starts a comment; blank lines are skipped. A host listed twice gets two launchers (two
//   nodes), which is how one machine can play several nodes.
//
// Errors are chorus::InvalidArgumentError naming the entry (and the line, for files).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chorus::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;

  bool operator==(const HostSlots&) const = default;
};

std::vector<HostSlots> parseHostList(std::string_view text);
std::vector<HostSlots> parseHostfile(std::string_view content);
// Reads and parses a hostfile; an unreadable or empty file is an error.
std::vector<HostSlots> readHostfile(const std::string& path);

}  // namespace chorus::launcher
