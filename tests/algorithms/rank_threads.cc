#include "rank_threads.h"

#include <gtest/gtest.h>

#include <future>
#include <sstream>

#include "chorus/error.h"
#include "transport/loopback/transport.h"

namespace chorus::algorithms::testing {

std::vector<std::exception_ptr> runRanks(int size,
                                         const RankFn& fn,
                                         std::chrono::milliseconds limit,
                                         std::vector<std::exception_ptr>* transportFailures) {
  auto transports = transport::loopback::createLoopbackGroup(size);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::future<void>> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&, rank] {
      try {
        fn(rank, *transports[rank]);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto& rank : ranks) {
    if (rank.wait_until(deadline) != std::future_status::ready) {
      ADD_FAILURE() << "ranks did not finish within " << limit.count()
                    << " ms; aborting every transport";
      for (auto& transport : transports) {
        transport->abort(std::make_exception_ptr(TimeoutError("test deadline passed")));
      }
      break;
    }
  }
  for (auto& rank : ranks) rank.wait();
  if (transportFailures != nullptr) {
    transportFailures->clear();
    for (auto& transport : transports) transportFailures->push_back(transport->failure());
  }
  return errors;
}

std::string describeErrors(const std::vector<std::exception_ptr>& errors) {
  std::ostringstream out;
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (!errors[rank])
      continue;
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const std::exception& e) {
      out << "rank " << rank << ": " << e.what() << "\n";
    }
  }
  return out.str();
}

Fingerprint makeFingerprint(uint64_t sequence,
                            Collective collective,
                            uint64_t count,
                            int root,
                            DataType dtype,
                            ReduceOp op,
                            bool typed) {
  Fingerprint fingerprint;
  fingerprint.sequence = sequence;
  fingerprint.collective = collective;
  fingerprint.count = count;
  fingerprint.root = root;
  if (typed) {
    fingerprint.dataType = static_cast<uint8_t>(dtype);
    fingerprint.reduceOp = static_cast<uint8_t>(op);
  }
  return fingerprint;
}

void expectClean(int size,
                 const std::vector<std::exception_ptr>& errors,
                 const std::vector<std::vector<std::string>>& failures) {
  EXPECT_EQ(describeErrors(errors), "");
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_TRUE(failures[rank].empty()) << "rank " << rank << ": " << failures[rank].front();
  }
}

}  // namespace chorus::algorithms::testing
