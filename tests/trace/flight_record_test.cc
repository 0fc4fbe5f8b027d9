// The flight record (Note [Flight recorder]): where a rank stands, the file it writes, and the
// summary that groups ranks by place.
#include "trace/flight_record.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "trace/recorder.h"

namespace chorus::trace {
namespace {

// A running send or recv (`detail`: the peer, with kSendBit for a send) of `bytes` in `group`.
Record pointToPoint(uint32_t group, uint64_t bytes, int64_t detail) {
  Record record;
  record.ticket = 1;
  record.group = group;
  record.fingerprint.collective = Collective::kPointToPoint;
  record.bytes = bytes;
  record.detail = detail;
  return record;
}

Record allreduce(uint64_t sequence, uint32_t group, bool running) {
  Record record;
  record.ticket = sequence;
  record.group = group;
  record.fingerprint.sequence = sequence;
  record.fingerprint.collective = Collective::kAllreduce;
  record.fingerprint.dataType = static_cast<uint8_t>(DataType::kFloat32);
  record.fingerprint.reduceOp = static_cast<uint8_t>(ReduceOp::kSum);
  record.fingerprint.count = 4194304;
  record.bytes = 16 << 20;
  record.startNs = 1;
  record.endNs = running ? 0 : 2;
  return record;
}

TEST(FlightRecord, StandingNamesTheRunningOperationAndTheLastFinished) {
  const uint32_t group = registerGroup("group [0, 1, 2, 3] (shm)");
  const std::string text = standing({allreduce(1234, group, false), allreduce(1235, group, true)});
  EXPECT_EQ(text,
            "in allreduce #1235 (float32 x 4194304, sum; 16.0 MiB) on group [0, 1, 2, 3] (shm); "
            "last finished allreduce #1234 (float32 x 4194304, sum; 16.0 MiB) on group [0, 1, 2, "
            "3] (shm)");
  EXPECT_EQ(standing({}), "in no operation; none finished");
}

TEST(FlightRecord, StandingNamesThePeerOfASend) {
  const uint32_t group = registerGroup("group [0, 1] (tcp)");
  const Record send = pointToPoint(group, 12, 1 | kSendBit);
  EXPECT_EQ(standing({send}), "in send to rank 1 (12 B) on group [0, 1] (tcp); none finished");
}

TEST(FlightRecord, StandingSaysARecvFromAnyRank) {
  const uint32_t group = registerGroup("group [0, 1, 2] (shm)");
  Record recv = pointToPoint(group, 8, kAnyRank);
  EXPECT_EQ(standing({recv}),
            "in recv from any rank (8 B) on group [0, 1, 2] (shm); none finished");
  recv.detail = 2;
  EXPECT_EQ(standing({recv}), "in recv from rank 2 (8 B) on group [0, 1, 2] (shm); none finished");
}

TEST(FlightRecord, StandingSaysAnOperationRanOnTheGpu) {
  const uint32_t group = registerGroup("group [0, 1] (shm)");
  Record record = allreduce(3, group, /*running=*/true);
  record.detail = kDeviceBit;
  EXPECT_EQ(standing({record}),
            "in allreduce #3 (float32 x 4194304, sum; 16.0 MiB) on the GPU, in group [0, 1] (shm); "
            "none finished");
}

TEST(FlightRecord, SummaryGroupsRanksByPlaceAndNamesThoseWithoutARecord) {
  const std::vector<std::string> lines =
      summarizeStandings({{0, "in allreduce #5"},
                          {1, "in allreduce #5"},
                          {3, "in allreduce #5"},
                          {2, "in allgather #5"}},
                         5, {{4, "rank 4 was killed by signal 9 (SIGKILL)"}});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "ranks 0, 1 and 3: in allreduce #5");
  EXPECT_EQ(lines[1], "rank 2: in allgather #5");
  EXPECT_EQ(lines[2], "rank 4: no flight record (rank 4 was killed by signal 9 (SIGKILL))");
}

TEST(FlightRecord, DumpWritesTheStandingFirstAndIsReadBack) {
  char pattern[] = "/tmp/chorus-flight-test-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string directory = pattern;
  ::setenv("CHORUS_RECORDER_DIR", directory.c_str(), 1);
  setRank(7);
  const uint32_t group = registerGroup("group [0, 7] (shm)");
  Fingerprint fingerprint;
  fingerprint.collective = Collective::kBarrier;
  fingerprint.sequence = 42;
  const Ticket ticket = beginOperation(group, fingerprint, 0, monotonicNs());
  EXPECT_TRUE(dumpFlightRecord("a test"));
  end(ticket, false);
  ::unsetenv("CHORUS_RECORDER_DIR");
  const std::map<int, std::string> standings = readStandings(directory);
  ASSERT_EQ(standings.size(), 1u);
  EXPECT_EQ(standings.at(7).substr(0, 42), "in barrier #42 (0 B) on group [0, 7] (shm)");
  std::ifstream file(directory + "/rank7.txt");
  std::string first, second;
  std::getline(file, first);
  std::getline(file, second);
  EXPECT_EQ(second, "reason: a test");
  std::filesystem::remove_all(directory);
  EXPECT_FALSE(dumpFlightRecord("no directory: nothing written"));
}

}  // namespace
}  // namespace chorus::trace
