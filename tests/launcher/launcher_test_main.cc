// launcher_tests' main. Besides running the tests, the binary doubles as a rank program for
// chorusrun: `launcher_tests --store-rank` connects to the store that chorusrun started, using the
// address and token from its environment, exchanges one value with every other rank, checks that
// a wrong token is refused, and prints "store ok".
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "chorus/error.h"
#include "core/net/socket.h"
#include "store/tcp_store.h"

namespace {

int storeRank() {
  using chorus::Deadline;
  using namespace std::chrono_literals;
  const char* address = std::getenv("CHORUS_STORE");
  const char* token = std::getenv("CHORUS_JOB_TOKEN");
  const char* rankText = std::getenv("CHORUS_RANK");
  const char* sizeText = std::getenv("CHORUS_SIZE");
  if (!address || !token || !rankText || !sizeText) {
    std::fprintf(stderr, "store-rank: launch variables missing\n");
    return 2;
  }
  int rank = std::atoi(rankText);
  int size = std::atoi(sizeText);
  try {
    auto storeAddress = chorus::net::Address::parse(address);
    chorus::store::TcpStore store(storeAddress, token, Deadline::after(10s));
    store.set("value/" + std::to_string(rank), chorus::store::toBytes(std::to_string(rank * 7)));
    for (int peer = 0; peer < size; ++peer) {
      auto value = store.get("value/" + std::to_string(peer), Deadline::after(10s));
      if (chorus::store::toString(value) != std::to_string(peer * 7)) {
        std::fprintf(stderr, "store-rank: wrong value from rank %d\n", peer);
        return 1;
      }
    }
    store.add("arrived", 1);
    store.wait({"arrived"}, Deadline::after(10s));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store-rank: %s\n", e.what());
    return 1;
  }
  try {
    chorus::store::TcpStore intruder(chorus::net::Address::parse(address), std::string(64, '0'),
                                     Deadline::after(3s));
    intruder.set("intruder", chorus::store::toBytes("x"));
    std::fprintf(stderr, "store-rank: a wrong token was accepted\n");
    return 1;
  } catch (const chorus::Error&) {
  }
  std::printf("store ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--store-rank") == 0) {
    return storeRank();
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
