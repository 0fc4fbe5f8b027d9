// The flight record: a rank's ring written out when something went wrong (Note [Flight recorder],
// recorder.h), and the one summary chorusrun prints from every rank's.
//
// A rank's record is CHORUS_RECORDER_DIR/rank<R>.txt: its first line is where the rank stands
// ("in allreduce #12 (float32 x 4, sum; 16 B) on group [0, 1] (shm); last finished broadcast #11
// (...)"), the second why it was written, then one line per operation in the ring, oldest first.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trace/ring.h"

namespace chorus::trace {

// Where a rank whose ring holds `records` stands: the operations it is in, and the last it
// finished. The text is the same on ranks that stand at the same place, so they can be grouped.
std::string standing(const std::vector<Record>& records);

// Writes this rank's flight record, saying `reason`, to CHORUS_RECORDER_DIR (nothing without
// one). Returns whether it was written. Never throws.
bool dumpFlightRecord(const std::string& reason) noexcept;
// The same for a failure, only the first time a failure is reported in this process: the moment
// the first error arose is where the rank stood (later ones are its consequences, such as the
// abort of every communicator on the way out).
bool dumpFlightRecordOnFailure(const std::string& reason) noexcept;

// The first line of every rank<R>.txt in `directory`, by rank.
std::map<int, std::string> readStandings(const std::string& directory);

// One line per place the ranks stand, ranks grouped ("ranks 0, 1 and 3: in allreduce #12 ..."),
// then "rank 2: no flight record (<why>)" for each of ranks [0, size) without one, `why` taken
// from `endings` where it knows the rank.
std::vector<std::string> summarizeStandings(const std::map<int, std::string>& standings,
                                            int size,
                                            const std::map<int, std::string>& endings);

}  // namespace chorus::trace
