// OperationRing (Note [Record ring]): what goes in comes back, oldest first; a full ring keeps
// the newest; an end for a reused slot is dropped; concurrent writers and a reader stay consistent.
#include "trace/ring.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace chorus::trace {
namespace {

Record operation(uint64_t sequence, int64_t startNs) {
  Record record;
  record.fingerprint.sequence = sequence;
  record.fingerprint.collective = Collective::kAllreduce;
  record.fingerprint.count = sequence * 10;
  record.bytes = sequence * 40;
  record.group = 3;
  record.startNs = startNs;
  return record;
}

TEST(OperationRing, KeepsEveryFieldAndTheEnd) {
  OperationRing ring(8);
  const uint64_t first = ring.begin(operation(1, 100));
  const uint64_t second = ring.begin(operation(2, 200));
  ring.end(first, 150, /*failed=*/false);
  ring.end(second, 260, /*failed=*/true);
  ring.begin(operation(3, 300));
  const std::vector<Record> records = ring.snapshot();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].ticket, 1u);
  EXPECT_EQ(records[0].fingerprint.sequence, 1u);
  EXPECT_EQ(records[0].fingerprint.count, 10u);
  EXPECT_EQ(records[0].fingerprint.collective, Collective::kAllreduce);
  EXPECT_EQ(records[0].bytes, 40u);
  EXPECT_EQ(records[0].group, 3u);
  EXPECT_EQ(records[0].startNs, 100);
  EXPECT_EQ(records[0].endNs, 150);
  EXPECT_FALSE(records[0].failed);
  EXPECT_EQ(records[1].endNs, 260);
  EXPECT_TRUE(records[1].failed);
  EXPECT_TRUE(records[2].running());
}

TEST(OperationRing, AFullRingKeepsTheNewestAndDropsStaleEnds) {
  OperationRing ring(4);
  std::vector<uint64_t> tickets;
  for (uint64_t i = 1; i <= 10; ++i) tickets.push_back(ring.begin(operation(i, int64_t(i))));
  ring.end(tickets[0], 99, false);  // its slot now holds operation 9: must stay running
  const std::vector<Record> records = ring.snapshot();
  ASSERT_EQ(records.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(records[i].fingerprint.sequence, 7 + i);
  for (const Record& record : records) EXPECT_TRUE(record.running());
  EXPECT_EQ(ring.begun(), 10u);
}

TEST(OperationRing, CapacityRoundsUpToAPowerOfTwo) {
  EXPECT_EQ(OperationRing(1000).capacity(), 1024u);
  EXPECT_EQ(OperationRing(1024).capacity(), 1024u);
  EXPECT_EQ(OperationRing(1).capacity(), 1u);
  OperationRing ring(3);  // 4 slots: the 4 newest of 6 stay
  for (uint64_t i = 1; i <= 6; ++i) ring.begin(operation(i, int64_t(i)));
  const std::vector<Record> records = ring.snapshot();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records.front().fingerprint.sequence, 3u);
}

TEST(OperationRing, ZeroCapacityRecordsNothing) {
  OperationRing ring(0);
  EXPECT_EQ(ring.begin(operation(1, 1)), 0u);
  ring.end(0, 5, false);
  EXPECT_TRUE(ring.snapshot().empty());
}

// Writers on several threads while a reader snapshots: every record read is whole (its fields
// agree with each other), and at the end every record is there and ended.
TEST(OperationRing, ConcurrentWritersAndAReaderAgree) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  OperationRing ring(kThreads * kPerThread);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      for (const Record& record : ring.snapshot()) {
        ASSERT_EQ(record.bytes, record.fingerprint.sequence * 40);
        ASSERT_EQ(record.startNs, int64_t(record.fingerprint.sequence));
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t sequence = uint64_t(t) * kPerThread + i + 1;
        ring.end(ring.begin(operation(sequence, int64_t(sequence))), int64_t(sequence) + 1, false);
      }
    });
  }
  for (auto& writer : writers) writer.join();
  done = true;
  reader.join();
  const std::vector<Record> records = ring.snapshot();
  ASSERT_EQ(records.size(), size_t(kThreads * kPerThread));
  for (const Record& record : records) EXPECT_EQ(record.endNs, record.startNs + 1);
}

}  // namespace
}  // namespace chorus::trace
