#include <gtest/gtest.h>

#include "transport/transport.h"

namespace chorus::transport {
namespace {

Fingerprint allreduce(uint64_t sequence, uint64_t count) {
  Fingerprint fingerprint;
  fingerprint.sequence = sequence;
  fingerprint.count = count;
  fingerprint.collective = Collective::kAllreduce;
  fingerprint.reduceOp = static_cast<uint8_t>(ReduceOp::kSum);
  fingerprint.dataType = static_cast<uint8_t>(DataType::kFloat32);
  return fingerprint;
}

TEST(Fingerprint, CollectiveNames) {
  EXPECT_EQ(toString(Collective::kAllreduce), "allreduce");
  EXPECT_EQ(toString(Collective::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(toString(Collective::kAllToAll), "all_to_all");
  EXPECT_EQ(toString(Collective::kBarrier), "barrier");
}

TEST(Fingerprint, FirstDifferenceFollowsFieldOrder) {
  Fingerprint a = allreduce(7, 8);
  EXPECT_EQ(a.firstDifference(a), "");
  Fingerprint b = a;
  b.count = 9;
  b.root = 2;
  EXPECT_EQ(a.firstDifference(b), "count");
  b.dataType = static_cast<uint8_t>(DataType::kInt32);
  EXPECT_EQ(a.firstDifference(b), "dtype");
  b.reduceOp = static_cast<uint8_t>(ReduceOp::kMax);
  EXPECT_EQ(a.firstDifference(b), "reduce_op");
  b.sequence = 8;
  EXPECT_EQ(a.firstDifference(b), "sequence");
  b.collective = Collective::kBroadcast;
  EXPECT_EQ(a.firstDifference(b), "collective");
  Fingerprint c = a;
  c.root = 3;
  EXPECT_EQ(a.firstDifference(c), "root");
}

TEST(Fingerprint, FieldValuesAndDescription) {
  Fingerprint a = allreduce(7, 1024);
  EXPECT_EQ(a.fieldValue("collective"), "allreduce");
  EXPECT_EQ(a.fieldValue("sequence"), "7");
  EXPECT_EQ(a.fieldValue("reduce_op"), "sum");
  EXPECT_EQ(a.fieldValue("dtype"), "float32");
  EXPECT_EQ(a.fieldValue("count"), "1024");
  EXPECT_EQ(a.fieldValue("root"), "none");
  EXPECT_THROW(a.fieldValue("colour"), InvalidArgumentError);
  EXPECT_EQ(a.describe(), "allreduce #7 (float32 x 1024, sum)");

  Fingerprint broadcast;
  broadcast.collective = Collective::kBroadcast;
  broadcast.sequence = 3;
  broadcast.count = 10;
  broadcast.root = 2;
  broadcast.dataType = static_cast<uint8_t>(DataType::kInt64);
  EXPECT_EQ(broadcast.describe(), "broadcast #3 (int64 x 10, root 2)");
  EXPECT_EQ(broadcast.fieldValue("reduce_op"), "none");

  Fingerprint barrier;
  barrier.sequence = 4;
  EXPECT_EQ(barrier.describe(), "barrier #4");

  Fingerprint bogus = a;  // values from a confused peer are printed, not trusted
  bogus.dataType = 200;
  bogus.reduceOp = 99;
  EXPECT_EQ(bogus.fieldValue("dtype"), "dtype 200");
  EXPECT_EQ(bogus.fieldValue("reduce_op"), "reduce op 99");
}

TEST(Fingerprint, MismatchErrorNamesBothRanksAndValues) {
  MismatchError error = makeMismatchError(1, 2, allreduce(7, 8), allreduce(7, 7));
  EXPECT_EQ(error.field(), "count");
  EXPECT_EQ(error.ranks(), (std::vector<int>{1, 2}));
  EXPECT_STREQ(error.what(),
               "rank 1 (this process): allreduce #7 (float32 x 8, sum) does not match rank 2's "
               "call, allreduce #7 (float32 x 7, sum): count is 8 here but 7 on rank 2. Every rank "
               "must call the same collectives in the same order with the same arguments.");
}

// A send and a recv of different counts (the mpi4py-port audit: MPI takes a larger receive
// buffer): the message says what a send and its recv must share, not that collectives differ.
TEST(Fingerprint, APointToPointMismatchSaysWhatASendAndItsRecvShare) {
  Fingerprint recv;
  recv.collective = Collective::kPointToPoint;
  recv.dataType = static_cast<uint8_t>(DataType::kFloat64);
  recv.count = 8;
  Fingerprint send = recv;
  send.count = 5;
  MismatchError error = makeMismatchError(0, 1, recv, send);
  EXPECT_EQ(error.field(), "count");
  const std::string message = error.what();
  EXPECT_NE(message.find("count is 8 here but 5 on rank 1. A send and the recv that matches it "
                         "(same peers and tag, in order) must agree on dtype and element count"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("collectives"), std::string::npos) << message;
}

TEST(Fingerprint, ByteCountErrorNamesBothSizes) {
  MismatchError error = makeByteCountMismatchError(0, 3, allreduce(2, 4), 16, 20);
  EXPECT_EQ(error.field(), "bytes");
  EXPECT_EQ(error.ranks(), (std::vector<int>{0, 3}));
  std::string message = error.what();
  EXPECT_NE(message.find("rank 0 (this process)"), std::string::npos);
  EXPECT_NE(message.find("expected a message of 16 bytes from rank 3 but rank 3 sent 20"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace chorus::transport
