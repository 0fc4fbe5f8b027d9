// The Store contract (src/store/store.h), run over every implementation: HashStore,
// PrefixStore over a HashStore, FileStore on a temporary file, and TcpStore against a server.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "core/net/handshake.h"
#include "store/file_store.h"
#include "store/hash_store.h"
#include "store/prefix_store.h"
#include "store/tcp_store.h"

namespace chorus::store {
namespace {

using namespace std::chrono_literals;

// Each factory owns one underlying store; make() returns a new handle onto it (for TcpStore a new
// connection, for FileStore a new FileStore on the same file).
struct HashStoreFactory {
  std::shared_ptr<HashStore> store = std::make_shared<HashStore>();
  std::shared_ptr<Store> make() { return store; }
};

struct PrefixStoreFactory {
  std::shared_ptr<HashStore> base = std::make_shared<HashStore>();
  std::shared_ptr<Store> make() { return std::make_shared<PrefixStore>("job/0", base); }
};

struct FileStoreFactory {
  std::string path;
  FileStoreFactory() {
    path = (std::filesystem::temp_directory_path() /
            ("chorus_store_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(reinterpret_cast<uintptr_t>(this))))
               .string();
    std::filesystem::remove(path);
  }
  ~FileStoreFactory() { std::filesystem::remove(path); }
  std::shared_ptr<Store> make() { return std::make_shared<FileStore>(path); }
};

struct TcpStoreFactory {
  std::string token = net::generateToken();
  TcpStoreServer server{"127.0.0.1", 0, token};
  std::shared_ptr<Store> make() {
    return std::make_shared<TcpStore>(net::Address{"127.0.0.1", server.port()}, token,
                                      Deadline::after(10s));
  }
};

template <typename Factory>
class StoreContractTest : public ::testing::Test {
 protected:
  Factory factory_;
};

using StoreTypes =
    ::testing::Types<HashStoreFactory, PrefixStoreFactory, FileStoreFactory, TcpStoreFactory>;

class StoreNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, HashStoreFactory>)
      return "HashStore";
    if (std::is_same_v<T, PrefixStoreFactory>)
      return "PrefixStore";
    if (std::is_same_v<T, FileStoreFactory>)
      return "FileStore";
    return "TcpStore";
  }
};
TYPED_TEST_SUITE(StoreContractTest, StoreTypes, StoreNames);

bool mentions(const std::exception& error, const std::string& text) {
  return std::string(error.what()).find(text) != std::string::npos;
}

TYPED_TEST(StoreContractTest, SetThenGetReturnsTheLatestValue) {
  auto store = this->factory_.make();
  Bytes binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<uint8_t>(i));
  store->set("binary", binary);
  store->set("empty", Bytes());
  store->set("text", toBytes("first"));
  store->set("text", toBytes("second"));
  auto other = this->factory_.make();  // another handle sees the same data
  EXPECT_EQ(other->get("binary", Deadline::after(5s)), binary);
  EXPECT_EQ(other->get("empty", Deadline::after(5s)), Bytes());
  EXPECT_EQ(toString(other->get("text", Deadline::after(5s))), "second");
}

TYPED_TEST(StoreContractTest, GetWaitsForASetFromAnotherThread) {
  auto reader = this->factory_.make();
  auto writer = this->factory_.make();
  auto got = std::async(std::launch::async,
                        [&] { return toString(reader->get("late", Deadline::after(10s))); });
  writer->set("late", toBytes("here"));
  EXPECT_EQ(got.get(), "here");
}

TYPED_TEST(StoreContractTest, GetTimesOutNamingTheKey) {
  auto store = this->factory_.make();
  auto start = Clock::now();
  try {
    store->get("never-set-key", Deadline::after(150ms));
    FAIL() << "get() of a missing key returned";
  } catch (const TimeoutError& error) {
    EXPECT_TRUE(mentions(error, "never-set-key")) << error.what();
  }
  auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 5s);
  // The store still works after a timeout.
  store->set("after", toBytes("ok"));
  EXPECT_EQ(toString(store->get("after", Deadline::after(5s))), "ok");
}

TYPED_TEST(StoreContractTest, AddCountsFromZero) {
  auto store = this->factory_.make();
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -7), -2);
  EXPECT_EQ(store->add("counter", 0), -2);
  EXPECT_EQ(toString(store->get("counter", Deadline::after(5s))), "-2");
  store->set("preset", toBytes("40"));
  EXPECT_EQ(store->add("preset", 2), 42);
}

TYPED_TEST(StoreContractTest, AddOnANonNumberIsInvalidArgument) {
  auto store = this->factory_.make();
  store->set("word", toBytes("hello"));
  try {
    store->add("word", 1);
    FAIL() << "add() on a non-number succeeded";
  } catch (const InvalidArgumentError& error) {
    EXPECT_TRUE(mentions(error, "word")) << error.what();
  }
  EXPECT_EQ(toString(store->get("word", Deadline::after(5s))), "hello");  // unchanged
  EXPECT_EQ(store->add("other", 1), 1);  // and the store still works
}

TYPED_TEST(StoreContractTest, CompareSetFollowsTheContract) {
  auto store = this->factory_.make();
  // Missing key, non-empty expected: no change, still missing.
  EXPECT_EQ(store->compareSet("cas", toBytes("x"), toBytes("y")), Bytes());
  EXPECT_FALSE(store->check({"cas"}));
  // Missing key matches an empty expected.
  EXPECT_EQ(toString(store->compareSet("cas", Bytes(), toBytes("one"))), "one");
  // Mismatch: returns the current value, unchanged.
  EXPECT_EQ(toString(store->compareSet("cas", toBytes("zero"), toBytes("two"))), "one");
  EXPECT_EQ(toString(store->get("cas", Deadline::after(5s))), "one");
  // Match: replaced.
  EXPECT_EQ(toString(store->compareSet("cas", toBytes("one"), toBytes("two"))), "two");
  EXPECT_EQ(toString(store->get("cas", Deadline::after(5s))), "two");
}

TYPED_TEST(StoreContractTest, WaitAndCheckNameTheMissingKeys) {
  auto store = this->factory_.make();
  EXPECT_TRUE(store->check({}));
  EXPECT_FALSE(store->check({"alpha-key", "beta-key"}));
  store->set("alpha-key", toBytes("a"));
  EXPECT_TRUE(store->check({"alpha-key"}));
  EXPECT_FALSE(store->check({"alpha-key", "beta-key"}));
  try {
    store->wait({"alpha-key", "beta-key"}, Deadline::after(100ms));
    FAIL() << "wait() for a missing key returned";
  } catch (const TimeoutError& error) {
    // (A PrefixStore names the full key, "<prefix>/beta-key".)
    EXPECT_TRUE(mentions(error, "beta-key\"")) << error.what();
    EXPECT_FALSE(mentions(error, "alpha-key")) << error.what();
  }
  auto waiter = std::async(std::launch::async, [store = this->factory_.make()] {
    store->wait({"alpha-key", "beta-key"}, Deadline::after(10s));
  });
  store->set("beta-key", toBytes("b"));
  waiter.get();
  EXPECT_TRUE(store->check({"alpha-key", "beta-key"}));
  store->wait({}, Deadline::after(1s));
}

TYPED_TEST(StoreContractTest, EraseRemovesTheKey) {
  auto store = this->factory_.make();
  EXPECT_FALSE(store->erase("gone"));
  store->set("gone", toBytes("v"));
  EXPECT_TRUE(store->erase("gone"));
  EXPECT_FALSE(store->check({"gone"}));
  EXPECT_FALSE(store->erase("gone"));
  EXPECT_THROW(store->get("gone", Deadline::after(50ms)), TimeoutError);
  EXPECT_EQ(store->add("gone", 3), 3);  // an erased key counts from 0 again
}

TYPED_TEST(StoreContractTest, ConcurrentAddsAreAtomic) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 1000;
  std::vector<std::shared_ptr<Store>> handles;
  for (int t = 0; t < kThreads; ++t) handles.push_back(this->factory_.make());
  std::vector<std::vector<int64_t>> returned(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAddsPerThread; ++i) returned[t].push_back(handles[t]->add("total", 1));
    });
  }
  for (auto& thread : threads) thread.join();
  // Atomic adds hand out every value 1..N exactly once.
  std::set<int64_t> seen;
  for (const auto& values : returned) seen.insert(values.begin(), values.end());
  EXPECT_EQ(seen.size(), size_t(kThreads * kAddsPerThread));
  EXPECT_EQ(*seen.begin(), 1);
  EXPECT_EQ(*seen.rbegin(), kThreads * kAddsPerThread);
  EXPECT_EQ(toString(handles[0]->get("total", Deadline::after(5s))),
            std::to_string(kThreads * kAddsPerThread));
}

TYPED_TEST(StoreContractTest, OneHandleIsThreadSafe) {
  auto store = this->factory_.make();
  constexpr int kThreads = 4;
  constexpr int kAdds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) store->add("shared", 1);
      store->set("done/" + std::to_string(t), toBytes("1"));
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store->add("shared", 0), kThreads * kAdds);
  EXPECT_TRUE(store->check({"done/0", "done/1", "done/2", "done/3"}));
}

TYPED_TEST(StoreContractTest, ManyWaitersWakeOnOneSet) {
  constexpr int kWaiters = 4;
  std::vector<std::future<std::string>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [store = this->factory_.make()] {
      return toString(store->get("signal", Deadline::after(10s)));
    }));
  }
  this->factory_.make()->set("signal", toBytes("go"));
  for (auto& waiter : waiters) EXPECT_EQ(waiter.get(), "go");
}

TEST(PrefixStoreTest, PrefixesIsolateKeys) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base);
  PrefixStore b("b", base);
  a.set("key", toBytes("from a"));
  b.set("key", toBytes("from b"));
  EXPECT_EQ(toString(a.get("key", Deadline::after(1s))), "from a");
  EXPECT_EQ(toString(b.get("key", Deadline::after(1s))), "from b");
  EXPECT_EQ(toString(base->get("a/key", Deadline::after(1s))), "from a");
  EXPECT_TRUE(b.erase("key"));
  EXPECT_TRUE(a.check({"key"}));
  EXPECT_FALSE(b.check({"key"}));
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  nested.set("k", toBytes("v"));
  EXPECT_TRUE(base->check({"outer/inner/k"}));
  EXPECT_THROW(PrefixStore("x", nullptr), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::store
