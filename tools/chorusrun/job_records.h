// JobRecords: what chorusrun does with the ranks' flight records and timeline parts.
//
//  - Flight records (Note [Flight recorder], src/trace/recorder.h): the ranks write them into
//    CHORUS_RECORDER_DIR when a communicator fails or stalls. chorusrun makes that directory
//    (0700, under $TMPDIR or /tmp) unless the user named one, exports it to the ranks, and when
//    the job failed prints where every rank stood, ranks grouped by place:
//      chorusrun: where the ranks stood (flight recorder):
//      chorusrun:   ranks 0 and 1: in allreduce #12 (...) on group [0, 1, 2] (shm); last ...
//      chorusrun:   rank 2: no flight record (rank 2 was killed by SIGKILL)
//    The directory it made is removed when it is done; one the user named is kept.
//  - Timeline (Note [Timeline], src/trace/timeline.h): with CHORUS_TRACE=path in chorusrun's
//    environment (which the ranks inherit), it merges the parts the ranks wrote into `path` once
//    they are gone, and says so.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace chorus::launcher {

class JobRecords {
 public:
  // Makes the records directory (or takes the user's CHORUS_RECORDER_DIR). Throws on failure.
  JobRecords();
  ~JobRecords();
  JobRecords(const JobRecords&) = delete;
  JobRecords& operator=(const JobRecords&) = delete;

  // The directory to export as CHORUS_RECORDER_DIR.
  const std::string& directory() const { return directory_; }
  // The lines to print after a failed job of `size` ranks, `endings` saying how ranks ended.
  std::vector<std::string> failureSummary(int size,
                                          const std::map<int, std::string>& endings) const;
  // Merges the timeline parts when CHORUS_TRACE names a trace; returns the line to print, or "".
  // Only node 0 merges (it ends after every other node): the other nodes' launchers leave their
  // parts, which node 0 finds on a shared filesystem (else copy them next to the path and run
  // chorus-trace merge), so that two launchers never merge one trace at once.
  std::string mergeTimeline(int nodeRank) const;

 private:
  std::string directory_;
  bool made_ = false;
};

}  // namespace chorus::launcher
