// The timeline (Note [Timeline]): a part per rank, merged into one trace with every event once.
// Validity as JSON is checked by the Python tests, which parse the merged file.
#include "trace/timeline.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trace/recorder.h"

namespace chorus::trace {
namespace {

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(Timeline, PartsMergeIntoOneTraceAndAreRemoved) {
  char pattern[] = "/tmp/chorus-timeline-test-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string path = std::string(pattern) + "/trace.json";
  const uint32_t group = registerGroup("group [0, 1] (shm)");
  for (int rank = 0; rank < 2; ++rank) {
    Record record;
    record.ticket = 1;
    record.group = group;
    record.fingerprint.collective = Collective::kAllreduce;
    record.fingerprint.sequence = 9;
    record.startNs = 5000;
    record.endNs = 8000;
    Record mark;
    mark.kind = RecordKind::kMark;
    mark.label = "bucket launched";
    mark.detail = 2;
    mark.startNs = 6000;
    mark.endNs = 6000;
    writePart(path, rank, {record, mark}, 0, /*offsetNs=*/rank * 1000, /*stopNs=*/9000);
    EXPECT_TRUE(std::filesystem::exists(partPath(path, rank)));
  }
  EXPECT_EQ(mergeParts(path), 2);
  EXPECT_FALSE(std::filesystem::exists(partPath(path, 0)));
  EXPECT_FALSE(std::filesystem::exists(partPath(path, 1)));
  const std::string merged = readAll(path);
  EXPECT_EQ(merged.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", 0), 0u);
  EXPECT_EQ(occurrences(merged, "\"name\":\"allreduce #9\""), 2u);
  EXPECT_EQ(occurrences(merged, "\"name\":\"bucket launched 2\""), 2u);
  // Rank 1's times moved by its 1 us offset: 5 us -> 6 us, duration 3 us on both.
  const std::string lane = ",\"tid\":" + std::to_string(group + 1);
  EXPECT_NE(merged.find("\"pid\":0" + lane + ",\"ts\":5.000,\"dur\":3.000"), std::string::npos);
  EXPECT_NE(merged.find("\"pid\":1" + lane + ",\"ts\":6.000,\"dur\":3.000"), std::string::npos);
  EXPECT_EQ(mergeParts(std::string(pattern) + "/other.json"), 0);
  std::filesystem::remove_all(pattern);
}

}  // namespace
}  // namespace chorus::trace
