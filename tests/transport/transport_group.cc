#include "transport_group.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <stdexcept>
#include <thread>

#include "store/hash_store.h"
#include "transport/loopback/transport.h"
#include "transport/shm/transport.h"
#include "transport/tcp/transport.h"

namespace chorus::transport::testing {

namespace {

// Forms a group of `kind` "tcp" or "shm": one thread per rank, one in-process store.
Group makeStoreGroup(const std::string& kind, int size) {
  static std::atomic<int> groups{0};
  auto store = std::make_shared<store::HashStore>();
  std::string scope = "test-" + std::to_string(groups++);
  Group group(size);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        TransportOptions options;
        options.rank = rank;
        options.size = size;
        options.store = store;
        options.token = "transport-test-token";
        options.scope = scope;
        options.bindHost = "127.0.0.1";
        options.deadline = Deadline::after(std::chrono::seconds(15));
        group[rank] =
            kind == "shm" ? shm::createShmTransport(options) : tcp::createTcpTransport(options);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& error : errors) {
    if (error)
      std::rethrow_exception(error);
  }
  return group;
}

}  // namespace

Group makeGroup(const std::string& kind, int size) {
  if (kind == "loopback")
    return loopback::createLoopbackGroup(size, loopback::SendCompletion::kWhenBuffered);
  if (kind == "loopback_rendezvous")
    return loopback::createLoopbackGroup(size, loopback::SendCompletion::kWhenMatched);
  if (kind == "tcp" || kind == "shm")
    return makeStoreGroup(kind, size);
  throw std::invalid_argument("unknown transport kind " + kind);
}

void crash(Transport& transport) {
  if (transport.name() == "loopback") {
    loopback::crashForTesting(transport);
  } else if (transport.name() == "shm") {
    shm::crashForTesting(transport);
  } else {
    tcp::crashForTesting(transport);
  }
}

std::vector<std::exception_ptr> runRanks(Group& group,
                                         const std::function<void(Transport&)>& body,
                                         std::chrono::milliseconds limit) {
  const size_t size = group.size();
  std::vector<std::exception_ptr> errors(size);
  std::mutex mutex;
  std::condition_variable changed;
  size_t finished = 0;
  std::vector<std::thread> threads;
  for (size_t rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(*group[rank]);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++finished;
      changed.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!changed.wait_for(lock, limit, [&] { return finished == size; })) {
      ADD_FAILURE() << "ranks did not finish within " << limit.count() << " ms; aborting them";
      for (auto& transport : group) {
        if (transport)
          transport->abort(std::make_exception_ptr(Error("test limit reached")));
      }
    }
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

void Signal::set() {
  std::lock_guard<std::mutex> lock(mutex_);
  set_ = true;
  changed_.notify_all();
}

void Signal::wait(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_for(lock, limit, [this] { return set_; })) {
    throw std::runtime_error("test signal not set in time");
  }
}

std::chrono::microseconds cpuTimeOfAnIdleWait(const std::string& kind) {
  auto group = makeGroup(kind, 2);
  auto cpuTime = [] {
    rusage usage{};
    ::getrusage(RUSAGE_THREAD, &usage);
    return std::chrono::microseconds((usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000L +
                                     usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  };
  std::chrono::microseconds used{0};
  auto errors = runRanks(group, [&](Transport& t) {
    if (t.rank() != 0)
      return;
    int value = 0;
    Request request;
    t.postRecv(1, 0, stamp(), &value, 4, request);
    auto before = cpuTime();
    Request* one[] = {&request};
    EXPECT_THROW(t.wait(one, Deadline::after(std::chrono::milliseconds(500))), TimeoutError);
    used = cpuTime() - before;
  });
  EXPECT_EQ(errors[0], nullptr);
  EXPECT_NE(group[0]->failure(), nullptr);  // the timeout failed the transport (failure is final)
  return used;
}

Fingerprint stamp(uint64_t sequence, uint64_t count) {
  Fingerprint fingerprint;
  fingerprint.sequence = sequence;
  fingerprint.count = count;
  fingerprint.collective = Collective::kAllreduce;
  fingerprint.reduceOp = static_cast<uint8_t>(ReduceOp::kSum);
  fingerprint.dataType = static_cast<uint8_t>(DataType::kFloat32);
  return fingerprint;
}

}  // namespace chorus::transport::testing
