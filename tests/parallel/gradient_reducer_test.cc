// GradientReducer on 2 and 3 ranks (threads, loopback TCP) with synthetic gradients: averages,
// bucket issue order, absent gradients, bf16 and fp16, the rebuild after the first iteration, and
// errors.
#include "chorus/gradient_reducer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "core/half.h"
#include "harness/run_ranks.h"

namespace chorus {
namespace {

using chorus::testing::runRanks;

std::shared_ptr<Communicator> borrow(Communicator& comm) {
  return std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
}

// Rank r's value j of gradient i; the average over p ranks is value(i, j) + (p - 1) / 2.
float value(int rank, int i, int64_t j) { return static_cast<float>(rank + i * 10 + j % 7); }

float* floats(const Tensor& t) { return static_cast<float*>(t.data()); }

void fill(GradientReducer& reducer, int rank, int i) {
  Tensor view = reducer.gradient(i);
  for (int64_t j = 0; j < view.numel(); ++j) floats(view)[j] = value(rank, i, j);
}

void expectAverage(GradientReducer& reducer, int size, int i, float extra = 0.0f) {
  Tensor view = reducer.gradient(i);
  for (int64_t j = 0; j < view.numel(); ++j) {
    float expected = value(0, i, j) + (size - 1) / 2.0f + extra;
    ASSERT_FLOAT_EQ(floats(view)[j], expected) << "gradient " << i << " element " << j;
  }
}

GradientReducerOptions smallBuckets() {
  GradientReducerOptions options;
  options.bucketBytes = 4096;  // 1024 floats
  options.firstBucketBytes = 1024;
  return options;
}

// Five float32 gradients; with smallBuckets() the reverse order gives buckets {4}, {3, 2}, {1, 0}.
std::vector<GradientSpec> fiveGradients() {
  return {{600, DataType::kFloat32},
          {300, DataType::kFloat32},
          {500, DataType::kFloat32},
          {700, DataType::kFloat32},
          {256, DataType::kFloat32}};
}

TEST(GradientReducerTest, AveragesEveryGradientAcrossRanks) {
  for (int p : {2, 3}) {
    runRanks(p, [&](Communicator& comm) {
      GradientReducer reducer(borrow(comm), fiveGradients(), smallBuckets());
      ASSERT_EQ(reducer.numBuckets(), 3);
      for (int iteration = 0; iteration < 3; ++iteration) {
        for (int i = 4; i >= 0; --i) {
          fill(reducer, comm.rank(), i);
          reducer.markReady(i);
        }
        auto used = reducer.finalize();
        for (int i = 0; i < 5; ++i) {
          EXPECT_TRUE(used[i]);
          expectAverage(reducer, p, i);
        }
      }
      EXPECT_EQ(reducer.generation(), 0);  // the ready order was the plan's: no rebuild
    });
  }
}

TEST(GradientReducerTest, ABucketIsIssuedOnceItAndEveryEarlierBucketAreReady) {
  runRanks(2, [&](Communicator& comm) {
    GradientReducer reducer(borrow(comm), fiveGradients(), smallBuckets());
    EXPECT_EQ(reducer.bucketGradients(0), std::vector<int>{4});
    EXPECT_EQ(reducer.bucketGradients(1), (std::vector<int>{3, 2}));
    EXPECT_EQ(reducer.bucketGradients(2), (std::vector<int>{1, 0}));
    for (int i = 0; i < 5; ++i) fill(reducer, comm.rank(), i);
    reducer.markReady(1);  // bucket 2, half of it
    reducer.markReady(0);  // bucket 2 is complete, but bucket 0 is not issued yet
    EXPECT_EQ(reducer.bucketsIssued(), 0);
    reducer.markReady(4);
    EXPECT_EQ(reducer.bucketsIssued(), 1);
    reducer.markReady(3);
    EXPECT_EQ(reducer.bucketsIssued(), 1);
    reducer.markReady(2);  // completes bucket 1, which releases bucket 2 as well
    EXPECT_EQ(reducer.bucketsIssued(), 3);
    reducer.finalize();
    for (int i = 0; i < 5; ++i) expectAverage(reducer, 2, i);
  });
}

TEST(GradientReducerTest, AnAbsentGradientContributesZeroAndUnusedEverywhereIsReported) {
  runRanks(3, [&](Communicator& comm) {
    GradientReducer reducer(borrow(comm), fiveGradients(), smallBuckets());
    for (int i = 0; i < 5; ++i) {
      // Gradient 2 only on rank 1; gradient 3 on no rank (its view holds stale values).
      fill(reducer, comm.rank(), i);
      if (i == 3 || (i == 2 && comm.rank() != 1))
        continue;
      reducer.markReady(i);
    }
    auto used = reducer.finalize();
    EXPECT_EQ(used, (std::vector<bool>{true, true, true, false, true}));
    Tensor two = reducer.gradient(2);
    for (int64_t j = 0; j < two.numel(); ++j)
      ASSERT_FLOAT_EQ(floats(two)[j], value(1, 2, j) / 3.0f);
    Tensor three = reducer.gradient(3);
    for (int64_t j = 0; j < three.numel(); ++j) ASSERT_EQ(floats(three)[j], 0.0f);
    for (int i : {0, 1, 4}) expectAverage(reducer, 3, i);
  });
}

TEST(GradientReducerTest, ValuesProducedElsewhereAreCopiedIn) {
  runRanks(2, [&](Communicator& comm) {
    GradientReducer reducer(borrow(comm), fiveGradients(), smallBuckets());
    std::vector<std::vector<float>> own(5);
    for (int i = 4; i >= 0; --i) {
      own[i].resize(reducer.gradient(i).numel());
      for (size_t j = 0; j < own[i].size(); ++j) own[i][j] = value(comm.rank(), i, j);
      reducer.markReady(i, Tensor(own[i].data(), {static_cast<int64_t>(own[i].size())}));
    }
    reducer.finalize();
    for (int i = 0; i < 5; ++i) expectAverage(reducer, 2, i);
    std::vector<float> wrongSize(3);
    EXPECT_THROW(reducer.markReady(0, Tensor(wrongSize.data(), {3})), InvalidArgumentError);
  });
}

TEST(GradientReducerTest, HalfPrecisionGradientsAreAveragedInFloat32) {
  runRanks(3, [&](Communicator& comm) {
    std::vector<GradientSpec> specs = {
        {1000, DataType::kBFloat16}, {10, DataType::kFloat32}, {500, DataType::kFloat16}};
    GradientReducer reducer(borrow(comm), specs, smallBuckets());
    auto* brain = static_cast<uint16_t*>(reducer.gradient(0).data());
    auto* ieee = static_cast<uint16_t*>(reducer.gradient(2).data());
    // bfloat16: 256 + 1 + 1 = 258, and 258 / 3 = 86 exactly. A bfloat16 running sum that adds a 1
    // to 256 rounds it away (257 is not a bfloat16), giving 256 / 3 -> 85.5: only float32 sums
    // give 86. float16: likewise 2048 + 1 + 1 (2049 is not a float16).
    for (int64_t j = 0; j < 1000; ++j)
      brain[j] = half::floatToBfloat16(comm.rank() == 0 ? 256.0f : 1.0f);
    for (int64_t j = 0; j < 500; ++j)
      ieee[j] = half::floatToFloat16(comm.rank() == 0 ? 2048.0f : 1.0f);
    for (int64_t j = 0; j < 10; ++j) floats(reducer.gradient(1))[j] = comm.rank() * 2.0f;
    for (int i : {2, 1, 0}) reducer.markReady(i);
    reducer.finalize();
    for (int64_t j = 0; j < 1000; ++j) ASSERT_EQ(half::bfloat16ToFloat(brain[j]), 86.0f);
    // 2050 / 3 = 683.33, rounded once to float16 (steps of 0.5 there): 683.5.
    for (int64_t j = 0; j < 500; ++j) ASSERT_EQ(half::float16ToFloat(ieee[j]), 683.5f);
    EXPECT_EQ(floats(reducer.gradient(1))[9], 2.0f);
  });
}

TEST(GradientReducerTest, BucketsFollowRankZerosReadyOrderAfterTheFirstIteration) {
  runRanks(2, [&](Communicator& comm) {
    GradientReducer reducer(borrow(comm), fiveGradients(), smallBuckets());
    // Rank 0 produces the gradients in registration order; rank 1 in yet another order.
    std::vector<int> order =
        comm.rank() == 0 ? std::vector<int>{0, 1, 2, 3, 4} : std::vector<int>{2, 4, 0, 3, 1};
    for (int i : order) {
      fill(reducer, comm.rank(), i);
      reducer.markReady(i);
    }
    reducer.finalize();
    EXPECT_EQ(reducer.generation(), 1);
    // Limits 1 KiB, then 4 KiB, over 0 (2400 B), 1 (1200 B), 2 (2000 B), 3 (2800 B), 4 (1024 B).
    EXPECT_EQ(reducer.bucketGradients(0), std::vector<int>{0});
    EXPECT_EQ(reducer.bucketGradients(1), (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(reducer.bucketGradients(2), std::vector<int>{4});
    for (int i = 0; i < 5; ++i) expectAverage(reducer, 2, i);  // carried into the new buffers
    // The next iteration accumulates into the new views: each rank adds its own values to the
    // first average, so the new average is twice the first.
    for (int i : order) {
      Tensor view = reducer.gradient(i);
      for (int64_t j = 0; j < view.numel(); ++j) floats(view)[j] += value(comm.rank(), i, j);
      reducer.markReady(i);
    }
    reducer.finalize();
    EXPECT_EQ(reducer.generation(), 1);  // rebuilt once only
    for (int i = 0; i < 5; ++i) {
      Tensor view = reducer.gradient(i);
      for (int64_t j = 0; j < view.numel(); ++j)
        ASSERT_FLOAT_EQ(floats(view)[j], 2.0f * (value(0, i, j) + 0.5f)) << i << " " << j;
    }
  });
}

TEST(GradientReducerTest, MarkingAGradientTwiceInOneIterationIsRefused) {
  runRanks(2, [&](Communicator& comm) {
    GradientReducer reducer(borrow(comm), fiveGradients(), smallBuckets());
    reducer.markReady(4);
    EXPECT_THROW(reducer.markReady(4), InvalidArgumentError);
    EXPECT_THROW(reducer.markReady(5), InvalidArgumentError);
    reducer.finalize();
  });
}

TEST(GradientReducerTest, RanksWithDifferentGradientsRaiseMismatchError) {
  runRanks(2, [&](Communicator& comm) {
    auto specs = fiveGradients();
    if (comm.rank() == 1)
      specs[4].numel = 255;
    GradientReducer reducer(borrow(comm), specs, smallBuckets());
    for (int i = 4; i >= 0; --i) reducer.markReady(i);
    EXPECT_THROW(reducer.finalize(), MismatchError);
  });
}

TEST(GradientReducerTest, WithTheCallersMemoryItKeepsThePlanAndTheBookkeepingOnly) {
  runRanks(2, [&](Communicator& comm) {
    GradientReducerOptions options = smallBuckets();
    options.issueBuckets = false;
    options.ownsMemory = false;
    GradientReducer reducer(borrow(comm), fiveGradients(), options);
    // The layout the caller allocates: the reverse order gives buckets {4}, {3, 2}, {1, 0}, each
    // gradient at an offset aligned to 64 bytes (16 floats).
    ASSERT_EQ(reducer.numBuckets(), 3);
    EXPECT_EQ(reducer.bucketNumel(0), 256);
    EXPECT_EQ(reducer.bucketNumel(1), 704 + 500);  // 700 padded to 704, then 500
    EXPECT_EQ(reducer.bucketDtype(1), DataType::kFloat32);
    EXPECT_EQ(reducer.location(2).bucket, 1);
    EXPECT_EQ(reducer.location(2).offset, 704);
    EXPECT_EQ(reducer.location(0).bucket, 2);
    EXPECT_EQ(reducer.location(0).offset, 304);  // after 1's 300, padded to 304
    EXPECT_THROW(reducer.gradient(0), InvalidArgumentError);
    EXPECT_THROW(reducer.bucket(0), InvalidArgumentError);
    EXPECT_THROW(reducer.storage(0), InvalidArgumentError);
    // Readiness is tracked as before: bucket 1 is handed out once 3 and 2 are both ready.
    reducer.markReady(4);
    reducer.markReady(3);
    EXPECT_EQ(reducer.takeReadyBuckets(), std::vector<int>{0});
    reducer.markReady(2);
    EXPECT_EQ(reducer.takeReadyBuckets(), std::vector<int>{1});
    // 0 and 1 absent on rank 1 only: no memory is touched, the last bucket is handed out, and
    // finalize() reports them present somewhere.
    if (comm.rank() == 0) {
      reducer.markReady(1);
      reducer.markReady(0);
    }
    reducer.markAbsent();
    EXPECT_EQ(reducer.takeReadyBuckets(), std::vector<int>{2});
    const std::vector<bool> used = reducer.finalize();
    EXPECT_EQ(used, std::vector<bool>(5, true));
    // Rank 0's order (4, 3, 2, 1, 0) is the reverse plan already: no rebuild.
    EXPECT_EQ(reducer.generation(), 0);
  });
}

TEST(GradientReducerTest, WithTheCallersMemoryARebuildMovesTheLayoutOnly) {
  runRanks(2, [&](Communicator& comm) {
    GradientReducerOptions options = smallBuckets();
    options.issueBuckets = false;
    options.ownsMemory = false;
    GradientReducer reducer(borrow(comm), fiveGradients(), options);
    for (int i = 0; i < 5; ++i) reducer.markReady(i);  // registration order, on every rank
    reducer.takeReadyBuckets();
    reducer.finalize();
    // As in BucketsFollowRankZerosReadyOrderAfterTheFirstIteration, with nothing to copy.
    EXPECT_EQ(reducer.generation(), 1);
    EXPECT_EQ(reducer.bucketGradients(0), std::vector<int>{0});
    EXPECT_EQ(reducer.location(0).bucket, 0);
    EXPECT_EQ(reducer.location(0).offset, 0);
    EXPECT_EQ(reducer.location(3).bucket, 1);
    EXPECT_EQ(reducer.location(3).offset, 304 + 512);  // after 1 (300 -> 304) and 2 (500 -> 512)
    EXPECT_EQ(reducer.bucketNumel(1), 304 + 512 + 700);
  });
}

TEST(GradientReducerTest, TheCallersMemoryNeedsTheCallerToReduceTheBuckets) {
  runRanks(1, [&](Communicator& comm) {
    GradientReducerOptions options;
    options.ownsMemory = false;  // but issueBuckets left true
    EXPECT_THROW(GradientReducer(borrow(comm), fiveGradients(), options), InvalidArgumentError);
  });
}

}  // namespace
}  // namespace chorus
