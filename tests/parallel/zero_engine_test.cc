// ZeroEngine on 2 and 3 ranks (threads, loopback TCP), float32 and bfloat16, stages 1 to 3, with
// SGD at lr = 1: a step moves each parameter by minus the average gradient, a closed form. The
// values are small integers (and gradients multiples of the rank count), so every average is exact
// in float32 and bfloat16 and the results are compared exactly.
#include "chorus/zero_engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "chorus/error.h"
#include "core/half.h"
#include "harness/run_ranks.h"
#include "trace/recorder.h"

namespace chorus::parallel {
namespace {

using chorus::testing::runRanks;
using Floats = std::vector<float>;

// Five parameters in three units, as planUnits would group them (reverse registration order).
const std::vector<int64_t> kNumels = {300, 7, 64, 129, 1};
const std::vector<std::vector<int>> kUnits = {{4, 3}, {2, 1}, {0}};
constexpr int kParameters = 5;

std::shared_ptr<Communicator> borrow(Communicator& comm) {
  return std::shared_ptr<Communicator>(&comm, [](Communicator*) {});
}

// runRanks with a deadline well past what these tests take (milliseconds).
void onRanks(int ranks, const chorus::testing::RankFunction& fn) {
  chorus::testing::RankOptions options;
  options.deadline = std::chrono::seconds(30);
  runRanks(ranks, fn, options);
}

float initial(int p, int64_t j) { return static_cast<float>((p * 7 + j) % 13 - 6); }

// Rank r's gradient of parameter p: a multiple of `ranks`, so any sum over ranks divided by
// `ranks` is an integer.
float gradient(int ranks, int rank, int p, int64_t j) {
  return static_cast<float>(ranks * ((p + j) % 5 - 2 + rank * (1 + j % 3)));
}

// The mean over ranks 0..ranks-1 of gradient(): the rank term averages to (ranks - 1) / 2.
float averageGradient(int ranks, int p, int64_t j) {
  return gradient(ranks, 0, p, j) + static_cast<float>(ranks * (ranks - 1) / 2 * (1 + j % 3));
}

// Whether `rank` leaves parameter p's gradient out of an iteration.
using Absence = std::function<bool(int rank, int p)>;
bool nothingAbsent(int, int) { return false; }

// Parameter p after SGD (lr 1) on gradients whose scales (one per iteration) add up to
// `totalScale`: initial - totalScale * (sum over the producing ranks of the gradient) / ranks.
Floats expectedParameter(int ranks, int p, float totalScale, const Absence& absent) {
  Floats out;
  for (int64_t j = 0; j < kNumels[p]; ++j) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r)
      if (!absent(r, p))
        sum += gradient(ranks, r, p, j);
    out.push_back(static_cast<float>(initial(p, j) - totalScale * sum / ranks));
  }
  return out;
}

Floats readFloats(const Tensor& t) {
  Floats out(static_cast<size_t>(t.numel()));
  for (size_t j = 0; j < out.size(); ++j)
    out[j] = t.dtype() == DataType::kFloat32
                 ? static_cast<const float*>(t.data())[j]
                 : half::bfloat16ToFloat(static_cast<const uint16_t*>(t.data())[j]);
  return out;
}

void writeFloats(const Tensor& t, const Floats& values) {
  for (size_t j = 0; j < values.size(); ++j) {
    if (t.dtype() == DataType::kFloat32)
      static_cast<float*>(t.data())[j] = values[j];
    else
      static_cast<uint16_t*>(t.data())[j] = half::floatToBfloat16(values[j]);
  }
}

ZeroOptions options(int stage, DataType dtype) {
  ZeroOptions out;
  out.stage = stage;
  out.dtype = dtype;
  return out;
}

OptimizerFactory sgd(double momentum = 0.0) {
  return [momentum](size_t numel) {
    SgdOptions sgdOptions;
    sgdOptions.lr = 1.0;
    sgdOptions.momentum = momentum;
    return makeSgd(numel, sgdOptions);
  };
}

std::unique_ptr<ZeroEngine> makeEngine(Communicator& comm,
                                       const ZeroOptions& zeroOptions,
                                       double momentum = 0.0,
                                       const std::vector<std::vector<int>>& units = kUnits) {
  auto engine =
      std::make_unique<ZeroEngine>(borrow(comm), kNumels, units, zeroOptions, sgd(momentum));
  for (int p = 0; p < kParameters; ++p) {
    Floats values;
    for (int64_t j = 0; j < kNumels[p]; ++j) values.push_back(initial(p, j));
    engine->setParameter(p, Tensor(values.data(), {kNumels[p]}));
  }
  return engine;
}

std::unique_ptr<ZeroEngine> makeEngine(Communicator& comm,
                                       int stage,
                                       DataType dtype,
                                       double momentum = 0.0) {
  return makeEngine(comm, options(stage, dtype), momentum);
}

// Produces this rank's gradient of p (stage 1 through the gradient view, else as values in the
// model's dtype) and returns markReady's result.
int produce(ZeroEngine& engine, int ranks, int rank, int p, float scale = 1.0f) {
  Floats values;
  for (int64_t j = 0; j < kNumels[p]; ++j) values.push_back(scale * gradient(ranks, rank, p, j));
  if (engine.stage() == 1) {
    writeFloats(engine.gradient(p), values);
    return engine.markReady(p);
  }
  std::vector<std::byte> storage(values.size() * dataTypeSize(engine.dtype()));
  Tensor tensor(storage.data(), engine.dtype(), {kNumels[p]});
  writeFloats(tensor, values);
  return engine.markReady(p, tensor);
}

// markReady's results for gradients produced in `order`, by a direct count of each unit's
// gradients still missing: the unit when its last one arrives, else -1.
std::vector<int> expectedCompletions(const std::vector<int>& order) {
  std::vector<int> unitOf(kParameters), missing;
  for (int u = 0; u < static_cast<int>(kUnits.size()); ++u) {
    missing.push_back(static_cast<int>(kUnits[u].size()));
    for (int p : kUnits[u]) unitOf[p] = u;
  }
  std::vector<int> out;
  for (int p : order) out.push_back(--missing[unitOf[p]] == 0 ? unitOf[p] : -1);
  return out;
}

void backward(
    ZeroEngine& engine, int ranks, int rank, const std::vector<int>& order, float scale = 1.0f) {
  std::vector<int> expected = expectedCompletions(order);
  for (size_t k = 0; k < order.size(); ++k)
    EXPECT_EQ(produce(engine, ranks, rank, order[k], scale), expected[k])
        << "markReady of parameter " << order[k];
}

// Every rank produces in its own order, so the fixed issue order is what keeps them in step.
std::vector<int> orderOf(int rank) {
  static const std::vector<std::vector<int>> orders = {
      {4, 3, 2, 1, 0}, {3, 4, 0, 2, 1}, {1, 0, 2, 3, 4}};
  return orders[rank];
}

void expectParameters(ZeroEngine& engine,
                      int ranks,
                      float totalScale,
                      const Absence& absent = nothingAbsent) {
  Floats all = engine.gatherParameters();
  ASSERT_EQ(all.size(), 501u);
  size_t start = 0;
  for (int p = 0; p < kParameters; ++p) {
    Floats expected = expectedParameter(ranks, p, totalScale, absent);
    EXPECT_EQ(Floats(all.begin() + start, all.begin() + start + kNumels[p]), expected)
        << "gathered parameter " << p;
    start += kNumels[p];
  }
  for (int u = 0; u < engine.layout().numUnits(); ++u) {
    if (engine.stage() == 3) {
      EXPECT_THROW(engine.parameter(engine.layout().unitParameters(u)[0]), InvalidArgumentError);
      engine.gather(u);
      engine.waitGathered(u);
      EXPECT_TRUE(engine.isGathered(u));
    }
    for (int p : engine.layout().unitParameters(u))
      EXPECT_EQ(readFloats(engine.parameter(p)), expectedParameter(ranks, p, totalScale, absent))
          << "view of parameter " << p;
    if (engine.stage() == 3) {
      engine.release(u);
      EXPECT_THROW(engine.parameter(engine.layout().unitParameters(u)[0]), InvalidArgumentError);
    }
  }
}

class ZeroEngineStepTest : public ::testing::TestWithParam<std::tuple<int, DataType, int>> {};

TEST_P(ZeroEngineStepTest, StepMovesEachParameterByMinusTheAverageGradient) {
  auto [stage, dtype, ranks] = GetParam();
  onRanks(ranks, [&](Communicator& comm) {
    auto engine = makeEngine(comm, stage, dtype);
    for (int iteration = 1; iteration <= 2; ++iteration) {
      backward(*engine, ranks, comm.rank(), orderOf(comm.rank()));
      engine->finalize();
      if (stage == 1)
        for (int p = 0; p < kParameters; ++p) {
          Floats average = readFloats(engine->gradient(p));
          for (int64_t j = 0; j < kNumels[p]; ++j)
            ASSERT_EQ(average[j], averageGradient(ranks, p, j))
                << "average gradient " << p << " element " << j;
        }
      engine->step();
      expectParameters(*engine, ranks, static_cast<float>(iteration));
      engine->zeroGradients();
    }
    EXPECT_EQ(engine->steps(), 2);
  });
}

std::string nameOf(const ::testing::TestParamInfo<std::tuple<int, DataType, int>>& info) {
  return "stage" + std::to_string(std::get<0>(info.param)) + "_" +
         std::string(toString(std::get<1>(info.param))) + "_" +
         std::to_string(std::get<2>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(ZeroStagesTypesRanks,
                         ZeroEngineStepTest,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(DataType::kFloat32,
                                                              DataType::kBFloat16),
                                            ::testing::Values(2, 3)),
                         nameOf);

TEST(ZeroEngineTest, MarkReadyReturnsTheUnitItsLastGradientCompletes) {
  onRanks(2, [&](Communicator& comm) {
    for (int stage : {1, 2, 3}) {
      auto engine = makeEngine(comm, stage, DataType::kFloat32);
      // Units {4, 3}, {2, 1}, {0}: worked out by hand.
      const std::vector<int> order = {3, 4, 0, 1, 2};
      const std::vector<int> expected = {-1, 0, 2, -1, 1};
      for (size_t k = 0; k < order.size(); ++k) {
        EXPECT_FALSE(engine->isReady(order[k]));
        EXPECT_EQ(produce(*engine, 2, comm.rank(), order[k]), expected[k]) << "stage " << stage;
        EXPECT_TRUE(engine->isReady(order[k]));
      }
      engine->finalize();
      EXPECT_FALSE(engine->isReady(0));  // a new iteration
      engine->step();
      expectParameters(*engine, 2, 1.0f);
    }
  });
}

TEST(ZeroEngineTest, AGradientNotProducedCountsAsZero) {
  // Rank r leaves out parameter r + 1, and no rank produces parameter 0 (all of unit 2).
  Absence absent = [](int rank, int p) { return p == 0 || p == rank + 1; };
  onRanks(3, [&](Communicator& comm) {
    for (int stage : {2, 3})
      for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16}) {
        auto engine = makeEngine(comm, stage, dtype);
        for (int p : orderOf(comm.rank()))
          if (!absent(comm.rank(), p))
            produce(*engine, 3, comm.rank(), p);
        engine->finalize();
        engine->step();
        expectParameters(*engine, 3, 1.0f, absent);
      }
  });
}

TEST(ZeroEngineTest, GradientsOfSeveralIterationsAccumulateUntilTheStep) {
  onRanks(2, [&](Communicator& comm) {
    for (int stage : {2, 3}) {
      auto engine = makeEngine(comm, stage, DataType::kFloat32);
      backward(*engine, 2, comm.rank(), orderOf(comm.rank()), 1.0f);
      engine->finalize();
      backward(*engine, 2, comm.rank(), orderOf(comm.rank()), 2.0f);
      engine->finalize();
      engine->step();
      expectParameters(*engine, 2, 3.0f);
    }
  });
}

TEST(ZeroEngineTest, StageOneViewsAccumulateIntoTheAverage) {
  onRanks(2, [&](Communicator& comm) {
    auto engine = makeEngine(comm, 1, DataType::kBFloat16);
    backward(*engine, 2, comm.rank(), orderOf(comm.rank()));
    engine->finalize();
    // Backward adds this rank's gradient to the average: the next average is twice the first.
    for (int p : orderOf(comm.rank())) {
      Tensor view = engine->gradient(p);
      Floats values = readFloats(view);
      for (int64_t j = 0; j < kNumels[p]; ++j) values[j] += gradient(2, comm.rank(), p, j);
      writeFloats(view, values);
      engine->markReady(p);
    }
    engine->finalize();
    engine->step();
    expectParameters(*engine, 2, 2.0f);
  });
}

TEST(ZeroEngineTest, OneBucketInFlightReducesEveryUnitWhateverTheOrder) {
  const std::vector<std::vector<int>> ownUnits = {{4}, {3}, {2}, {1}, {0}};
  onRanks(3, [&](Communicator& comm) {
    for (int stage : {2, 3}) {
      ZeroOptions zeroOptions = options(stage, DataType::kFloat32);
      zeroOptions.bucketsInFlight = 1;
      auto engine = makeEngine(comm, zeroOptions, 0.0, ownUnits);
      for (int iteration = 1; iteration <= 3; ++iteration) {
        for (int p : orderOf((comm.rank() + iteration) % 3)) produce(*engine, 3, comm.rank(), p);
        engine->finalize();
      }
      engine->step();
      expectParameters(*engine, 3, 3.0f);
    }
  });
}

TEST(ZeroEngineTest, MisuseIsInvalidArgumentAndLeavesTheIterationIntact) {
  onRanks(2, [&](Communicator& comm) {
    auto engine = makeEngine(comm, 2, DataType::kFloat32);
    EXPECT_THROW(engine->gradient(0), InvalidArgumentError);  // stage 1 only
    EXPECT_THROW(engine->markReady(0), InvalidArgumentError);
    EXPECT_THROW(engine->gather(0), InvalidArgumentError);  // stage 3 only
    EXPECT_EQ(produce(*engine, 2, comm.rank(), 4), -1);
    EXPECT_THROW(produce(*engine, 2, comm.rank(), 4), InvalidArgumentError);
    EXPECT_THROW(engine->step(), InvalidArgumentError);
    std::vector<uint16_t> brain(kNumels[3]);
    EXPECT_THROW(engine->markReady(3, Tensor(brain.data(), DataType::kBFloat16, {kNumels[3]})),
                 InvalidArgumentError);
    Floats wrongSize(kNumels[3] - 1);
    EXPECT_THROW(engine->markReady(3, Tensor(wrongSize.data(), {kNumels[3] - 1})),
                 InvalidArgumentError);
    EXPECT_THROW(engine->markReady(5, Tensor(wrongSize.data(), {1})), InvalidArgumentError);
    EXPECT_THROW(engine->setParameter(0, Tensor(wrongSize.data(), {kNumels[3] - 1})),
                 InvalidArgumentError);
    for (int p : {3, 2, 1, 0}) produce(*engine, 2, comm.rank(), p);
    engine->finalize();
    engine->step();
    expectParameters(*engine, 2, 1.0f);

    auto viewed = makeEngine(comm, 1, DataType::kFloat32);
    EXPECT_EQ(viewed->markReady(4), -1);
    EXPECT_THROW(viewed->markReady(4), InvalidArgumentError);
    EXPECT_THROW(viewed->step(), InvalidArgumentError);
    viewed->finalize();
  });
}

TEST(ZeroEngineTest, UnsupportedStagesAndTypesAreRefused) {
  onRanks(2, [&](Communicator& comm) {
    for (int stage : {0, 4})
      EXPECT_THROW(
          ZeroEngine(borrow(comm), kNumels, kUnits, options(stage, DataType::kFloat32), sgd()),
          InvalidArgumentError)
          << "stage " << stage;
    for (DataType dtype : {DataType::kInt32, DataType::kFloat64})
      EXPECT_THROW(ZeroEngine(borrow(comm), kNumels, kUnits, options(1, dtype), sgd()),
                   InvalidArgumentError);
  });
}

// Compression (ZeroOptions::commDtype) on a float32 model. The gradients above are small integers,
// which bfloat16 and float16 hold exactly: every average, and so every step, is the float32 one.
class ZeroEngineCompressedTest : public ::testing::TestWithParam<std::tuple<int, DataType, int>> {};

TEST_P(ZeroEngineCompressedTest, ExactGradientsGiveTheFloat32Steps) {
  auto [stage, wire, ranks] = GetParam();
  onRanks(ranks, [&](Communicator& comm) {
    ZeroOptions compressed = options(stage, DataType::kFloat32);
    compressed.commDtype = wire;
    auto engine = makeEngine(comm, compressed);
    for (int iteration = 1; iteration <= 2; ++iteration) {
      backward(*engine, ranks, comm.rank(), orderOf(comm.rank()));
      engine->finalize();
      engine->step();
      expectParameters(*engine, ranks, static_cast<float>(iteration));
      engine->zeroGradients();
    }
  });
}

// A gradient of p * (1 + 2^-12) on each of p ranks: each rank sends its share, 1 + 2^-12, which
// float32 holds while bfloat16 (7 fraction bits) and float16 (10) round it to 1. Through the wire
// the average is exactly p * 1 = p, so SGD (lr 1) moves each parameter by exactly p; uncompressed
// it would move by p * (1 + 2^-12).
TEST_P(ZeroEngineCompressedTest, GradientsTravelInTheWireDtype) {
  auto [stage, wire, ranks] = GetParam();
  const float gradientValue = static_cast<float>(ranks) * (1.0f + 1.0f / 4096.0f);
  const auto average = static_cast<float>(ranks);
  onRanks(ranks, [&](Communicator& comm) {
    ZeroOptions compressed = options(stage, DataType::kFloat32);
    compressed.commDtype = wire;
    auto engine = makeEngine(comm, compressed);
    for (int p = 0; p < kParameters; ++p) {
      Floats values(static_cast<size_t>(kNumels[p]), gradientValue);
      if (stage == 1) {
        writeFloats(engine->gradient(p), values);
        engine->markReady(p);
      } else {
        engine->markReady(p, Tensor(values.data(), {kNumels[p]}));
      }
    }
    engine->finalize();
    if (stage == 1) {
      for (int p = 0; p < kParameters; ++p)
        EXPECT_EQ(readFloats(engine->gradient(p)), Floats(static_cast<size_t>(kNumels[p]), average))
            << "average gradient of parameter " << p;
    }
    engine->step();
    Floats all = engine->gatherParameters();
    size_t at = 0;
    for (int p = 0; p < kParameters; ++p)
      for (int64_t j = 0; j < kNumels[p]; ++j, ++at)
        ASSERT_EQ(all[at], initial(p, j) - average) << "parameter " << p << " element " << j;
  });
}

// What goes on the wire, as the timeline records each reduction's fingerprint: a sum of values in
// the wire dtype (a sum of 16-bit values stays 16-bit on backends that reduce half precision;
// an avg would be staged in float32 and move as many bytes as uncompressed).
TEST_P(ZeroEngineCompressedTest, ReductionsAreSumsInTheWireDtype) {
  auto [stage, wire, ranks] = GetParam();
  ASSERT_TRUE(trace::startTimeline(4096));
  onRanks(ranks, [&](Communicator& comm) {
    ZeroOptions compressed = options(stage, DataType::kFloat32);
    compressed.commDtype = wire;
    auto engine = makeEngine(comm, compressed);
    backward(*engine, ranks, comm.rank(), orderOf(comm.rank()));
    engine->finalize();
  });
  uint64_t dropped = 0;
  const std::vector<trace::Record> records = trace::stopTimeline(dropped);
  const Collective reduction = stage == 1 ? Collective::kAllreduce : Collective::kReduceScatter;
  int reductions = 0;
  for (const trace::Record& record : records) {
    if (record.kind != trace::RecordKind::kOperation || record.fingerprint.collective != reduction)
      continue;
    ++reductions;
    EXPECT_EQ(record.fingerprint.dataType, static_cast<uint8_t>(wire));
    EXPECT_EQ(record.fingerprint.reduceOp, static_cast<uint8_t>(ReduceOp::kSum));
  }
  EXPECT_EQ(reductions, ranks * static_cast<int>(kUnits.size()));
}

std::string compressedName(const ::testing::TestParamInfo<std::tuple<int, DataType, int>>& info) {
  return "stage" + std::to_string(std::get<0>(info.param)) + "_wire_" +
         std::string(toString(std::get<1>(info.param))) + "_" +
         std::to_string(std::get<2>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(ZeroCompression,
                         ZeroEngineCompressedTest,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(DataType::kBFloat16,
                                                              DataType::kFloat16),
                                            ::testing::Values(2, 3)),
                         compressedName);

TEST(ZeroEngineTest, CompressionOnlyNarrowsFloat32ToHalfPrecision) {
  onRanks(2, [&](Communicator& comm) {
    auto refused = [&](DataType model, DataType wire) {
      ZeroOptions zeroOptions = options(2, model);
      zeroOptions.commDtype = wire;
      try {
        ZeroEngine(borrow(comm), kNumels, kUnits, zeroOptions, sgd());
        ADD_FAILURE() << toString(model) << " gradients as " << toString(wire) << " were accepted";
      } catch (const InvalidArgumentError& error) {
        EXPECT_NE(std::string(error.what()).find("cannot travel as"), std::string::npos)
            << error.what();
      }
    };
    refused(DataType::kFloat32, DataType::kInt32);
    refused(DataType::kFloat32, DataType::kFloat64);
    refused(DataType::kBFloat16, DataType::kFloat16);
    ZeroOptions same = options(2, DataType::kBFloat16);
    same.commDtype = DataType::kBFloat16;  // the model's own dtype: nothing to compress
    EXPECT_NO_THROW(ZeroEngine(borrow(comm), kNumels, kUnits, same, sgd()));
  });
}

// Each unit's shard: the smallest multiple of the alignment covering its elements in `ranks`.
int64_t shardOfUnit(const std::vector<int>& unit, int ranks, int64_t align) {
  int64_t total = 0;
  for (int p : unit) total += kNumels[p];
  int64_t perRank = (total + ranks - 1) / ranks;
  return (perRank + align - 1) / align * align;
}

TEST(ZeroEngineTest, MemoryIsTheClosedFormOfEachStage) {
  onRanks(2, [&](Communicator& comm) {
    int64_t shard = 0;
    for (const auto& unit : kUnits) shard += shardOfUnit(unit, 2, 32);
    const int64_t padded = 2 * shard;
    for (int stage : {1, 2, 3})
      for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16})
        for (double momentum : {0.0, 0.5}) {
          SCOPED_TRACE("stage " + std::to_string(stage) + " " + std::string(toString(dtype)));
          auto engine = makeEngine(comm, stage, dtype, momentum);
          ASSERT_EQ(engine->layout().shardNumel(), shard);
          const size_t element = dataTypeSize(dtype);
          ZeroMemory memory = engine->memory();
          EXPECT_EQ(memory.parameters, (stage == 3 ? shard : padded) * element);
          EXPECT_EQ(memory.gradients, (stage == 1 ? padded : shard) * element);
          size_t state =
              (momentum > 0 ? 4 * shard : 0) + (dtype == DataType::kFloat32 ? 0 : 4 * shard);
          EXPECT_EQ(memory.optimizerState, state);
          EXPECT_EQ(memory.buffers, 0u);
          if (stage == 3) {
            engine->gather(2);
            engine->waitGathered(2);
            EXPECT_EQ(engine->memory().buffers, 2 * shardOfUnit(kUnits[2], 2, 32) * element);
            engine->release(2);
            EXPECT_EQ(engine->memory().buffers, 0u);
            EXPECT_EQ(engine->memory().peakBuffers, 2 * shardOfUnit(kUnits[2], 2, 32) * element);
          }
        }
  });
}

// Stage 3's two releases, on a unit of many pages. release() leaves the memory, values and all, to
// a view that holds it (autograd may still read it), and takes its bytes off the account only when
// the view goes. releaseKeepingAddress() takes them off at once: the view reads zeros (but at the
// edges, which share a page with other memory) until the next gather writes the unit there again.
TEST(ZeroEngineTest, StageThreeReleasesLeaveTheMemoryToViewsOrKeepOnlyItsAddress) {
  onRanks(2, [&](Communicator& comm) {
    constexpr int64_t kNumel = 1 << 18;  // 1 MiB of float32
    ZeroEngine engine(borrow(comm), {kNumel}, {{0}}, options(3, DataType::kFloat32), sgd(0.0));
    Floats values(kNumel);
    for (int64_t j = 0; j < kNumel; ++j) values[j] = static_cast<float>(j % 1000 + 1);
    engine.setParameter(0, Tensor(values.data(), {kNumel}));
    const size_t bytes = static_cast<size_t>(engine.layout().plan(0).paddedNumel()) * 4;

    engine.waitGathered(0);
    Tensor view = engine.parameter(0);
    auto holder = engine.parameterStorage(0);
    engine.release(0);
    EXPECT_FALSE(engine.isGathered(0));
    EXPECT_EQ(readFloats(view), values);
    EXPECT_EQ(engine.memory().buffers, bytes);
    holder.reset();
    EXPECT_EQ(engine.memory().buffers, 0u);

    engine.waitGathered(0);
    Tensor kept = engine.parameter(0);
    holder = engine.parameterStorage(0);
    engine.releaseKeepingAddress(0);
    EXPECT_EQ(engine.memory().buffers, 0u);
    Floats read = readFloats(kept);
    const auto zeros = std::count(read.begin(), read.end(), 0.0f);
    EXPECT_GE(zeros, kNumel - 2 * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) / 4);
    engine.waitGathered(0);
    EXPECT_EQ(engine.parameter(0).data(), kept.data());
    EXPECT_EQ(readFloats(kept), values);
    EXPECT_EQ(engine.memory().buffers, bytes);
    engine.release(0);
    holder.reset();
    EXPECT_EQ(engine.memory().buffers, 0u);
  });
}

// The owned pieces of `perParameter`, in the order exportState lists them.
Floats ownedValues(const ZeroLayout& layout, const std::vector<Floats>& perParameter) {
  Floats out;
  for (const OwnedPiece& piece : layout.ownedPieces())
    for (int64_t i = 0; i < piece.numel; ++i)
      out.push_back(perParameter[piece.parameter][piece.parameterOffset + i]);
  return out;
}

TEST(ZeroEngineTest, ExportedStateImportsIntoAFreshEngine) {
  onRanks(2, [&](Communicator& comm) {
    for (int stage : {1, 2, 3})
      for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16}) {
        SCOPED_TRACE("stage " + std::to_string(stage) + " " + std::string(toString(dtype)));
        auto trained = makeEngine(comm, stage, dtype, 0.5);
        backward(*trained, 2, comm.rank(), orderOf(comm.rank()));
        trained->finalize();
        trained->step();
        EXPECT_EQ(trained->stateNames(), (std::vector<std::string>{"param", "momentum_buffer"}));
        std::vector<Floats> params, averages(kParameters);
        for (int p = 0; p < kParameters; ++p) {
          params.push_back(expectedParameter(2, p, 1.0f, nothingAbsent));
          for (int64_t j = 0; j < kNumels[p]; ++j) averages[p].push_back(averageGradient(2, p, j));
        }
        // After the first step, the momentum buffer is the average gradient.
        EXPECT_EQ(trained->exportState("param"), ownedValues(trained->layout(), params));
        EXPECT_EQ(trained->exportState("momentum_buffer"),
                  ownedValues(trained->layout(), averages));
        EXPECT_THROW(trained->exportState("exp_avg"), InvalidArgumentError);

        auto restored = makeEngine(comm, stage, dtype, 0.5);
        for (const std::string& name : trained->stateNames())
          restored->importState(name, trained->exportState(name));
        restored->setSteps(trained->steps());
        restored->publishParameters();
        expectParameters(*restored, 2, 1.0f);
        Floats tooShort(trained->layout().ownedNumel() - 1);
        EXPECT_THROW(restored->importState("param", tooShort), InvalidArgumentError);

        // Momentum 0.5 carried over: the second step moves by 1.5 average gradients.
        for (ZeroEngine* engine : {trained.get(), restored.get()}) {
          engine->zeroGradients();
          backward(*engine, 2, comm.rank(), orderOf(comm.rank()));
          engine->finalize();
          engine->step();
          expectParameters(*engine, 2, 2.5f);
        }
      }
  });
}

}  // namespace
}  // namespace chorus::parallel
