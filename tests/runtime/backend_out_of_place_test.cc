// Every backend of the table takes allreduce and broadcast out of place (core/collective_args.h:
// input and output are different buffers): the output gets the result, the input is left as it
// was. The communicator front end still calls them in place, so this is where the out-of-place
// paths are checked: backends made through createBackend by name, ranks as threads of this
// process over one in-process store, results against closed forms.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "backend/factory.h"
#include "store/hash_store.h"
#include "store/prefix_store.h"

namespace chorus {
namespace {

struct Case {
  std::string backend;
  int size;
  std::vector<std::string> nodeIds;  // empty: one node
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.backend + "_" + std::to_string(info.param.size) +
         (info.param.nodeIds.empty() ? "" : "_two_nodes");
}

class BackendOutOfPlace : public ::testing::TestWithParam<Case> {};

// Rank r's value at index i: small integers, so float sums are exact.
float valueAt(int rank, size_t i) { return static_cast<float>((i * 5 + rank * 3) % 13) - 6; }

backend::CallContext callOf(uint64_t sequence, Collective collective, size_t count, int root = -1) {
  Fingerprint fingerprint;
  fingerprint.sequence = sequence;
  fingerprint.collective = collective;
  fingerprint.count = count;
  fingerprint.root = root;
  return backend::CallContext{fingerprint, Deadline::after(std::chrono::seconds(60))};
}

// One rank: allreduce (small and chunked sizes) and broadcast from every root, out of place.
void runRank(const Case& c, int rank, const std::shared_ptr<store::Store>& store) {
  backend::BackendOptions options;
  options.name = c.backend;
  options.rank = rank;
  options.size = c.size;
  options.oneNode = c.nodeIds.empty();
  options.nodeIds = c.nodeIds;
  options.store = store;
  options.token = "test-token";
  options.scope = "out-of-place";
  options.deadline = Deadline::after(std::chrono::seconds(60));
  auto engine = backend::createBackend(options);
  uint64_t sequence = 0;
  for (size_t count : {size_t{0}, size_t{7}, size_t{300000}}) {
    std::vector<float> input(count);
    for (size_t i = 0; i < count; ++i) input[i] = valueAt(rank, i);
    const std::vector<float> original = input;
    std::vector<float> output(count, -1000.0f);
    engine->allreduce(callOf(++sequence, Collective::kAllreduce, count),
                      {input.data(), output.data(), count, DataType::kFloat32, ReduceOp::kSum});
    EXPECT_EQ(input, original) << "allreduce changed its input, count " << count;
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < c.size; ++r) expected += valueAt(r, i);
      ASSERT_EQ(output[i], expected) << "allreduce, count " << count << ", index " << i;
    }
    for (int root = 0; root < c.size; ++root) {
      std::vector<float> received(count, -1000.0f);
      engine->broadcast(callOf(++sequence, Collective::kBroadcast, count * 4, root),
                        {input.data(), received.data(), count * 4, root});
      EXPECT_EQ(input, original) << "broadcast changed its input, count " << count;
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(received[i], valueAt(root, i)) << "broadcast from " << root << ", index " << i;
    }
  }
  engine->close();
}

TEST_P(BackendOutOfPlace, OutputGetsTheResultAndInputIsUntouched) {
  const Case c = GetParam();
  auto store = std::make_shared<store::HashStore>();
  std::vector<std::future<void>> ranks;
  for (int rank = 0; rank < c.size; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&, rank] {
      runRank(c, rank, std::make_shared<store::PrefixStore>("out-of-place", store));
    }));
  }
  for (auto& rank : ranks) {
    ASSERT_EQ(rank.wait_for(std::chrono::seconds(120)), std::future_status::ready)
        << "a rank did not finish in 120 s";
    rank.get();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends,
                         BackendOutOfPlace,
                         ::testing::Values(Case{"void", 1, {}},
                                           Case{"tcp", 3, {}},
                                           Case{"shm", 3, {}},
                                           Case{"hierarchical", 3, {"a", "a", "b"}}),
                         caseName);

}  // namespace
}  // namespace chorus
