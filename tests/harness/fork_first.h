// ForkFirst: child processes forked before the test starts any thread, then a TCP store for them.
//
// A process that forks while other threads run hands the child a copy of whatever locks those
// threads held at that instant (the sanitizers' allocators, for one: a child of an ASan process
// hung in its first malloc), and ThreadSanitizer may give a child's new thread the id of a parent
// thread it still records. So the children are forked first, while this process has one thread,
// and wait on a pipe; start() then serves the store (its threads) and sends every child the
// store's address. A child that hears nothing exits 3: at once when the pipe closes (the parent
// died, or the ForkFirst went away without start()), else at `deadline`. Every child also gets
// SIGKILL when the thread that forked it ends (PR_SET_PDEATHSIG).
//
// Threading: one thread calls fork() and start(), in that order, before starting any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/net/socket.h"
#include "store/tcp_store.h"

namespace chorus::testing {

class ForkFirst {
 public:
  // `token` is the store's job token; children wait at most `deadline` for start().
  explicit ForkFirst(std::string token, std::chrono::seconds deadline = std::chrono::seconds(60));
  ~ForkFirst();
  ForkFirst(const ForkFirst&) = delete;
  ForkFirst& operator=(const ForkFirst&) = delete;

  // Forks a child that, once the store serves, runs `body(storeAddress)` and _exits with what it
  // returns (1 if it throws). Returns the child's pid. Call before start(), with no other thread.
  pid_t fork(const std::function<int(const net::Address& store)>& body);
  // Starts the store on 127.0.0.1 and sends its address to every child. Returns the address.
  net::Address start();

 private:
  std::string token_;
  std::chrono::seconds deadline_;
  std::vector<int> pipes_;  // write ends, one per child
  std::unique_ptr<store::TcpStoreServer> server_;
};

}  // namespace chorus::testing
