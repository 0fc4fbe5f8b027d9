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
#include "out_of_place_check.h"
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

// One rank: the shared check (out_of_place_check.h) on a backend made by name.
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
  testing::checkOutOfPlace(*engine, rank, c.size);
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
