// FaultyTransport: a Transport wrapper that injects one fault into the messages this rank sends,
// for fault-injection tests. Never used by chorus itself.
//
// A Fault names the peer whose link misbehaves (or every peer) and how many bytes pass untouched
// first. The fault then applies to every later send to that peer, starting with the message that
// would carry the count past `afterBytes`:
//   kDelay     the message is held for `delay` before it is handed on (a slow link or a late rank);
//   kJitter    the message is held for a random time, uniform in [0, `delay`], drawn from a
//              generator seeded with `seed` (a noisy link: soak tests, tests/soak/);
//   kDrop      the message is never handed on, and its send completes here as if it had been sent
//              (a lost message: the receiver must time out, naming this rank);
//   kTruncate  only the first half of the message is handed on (the receiver must raise a
//              MismatchError on the byte count, naming this rank);
//   kClose     this rank closes its transport, saying goodbye (a rank that shut down early);
//   kCrash     this rank leaves without goodbye, as a killed process would (tcp, shm, loopback).
// After kClose or kCrash, this rank's own calls fail as the inner transport's do.
// Everything else (receives, wait, abort, failure) passes straight to the inner transport.
// Threading: as the Transport contract (one thread posts and waits).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <unordered_set>
#include <vector>

#include "transport/transport.h"

namespace chorus::transport::faulty {

struct Fault {
  enum class Kind { kDelay, kJitter, kDrop, kTruncate, kClose, kCrash };
  Kind kind = Kind::kDrop;
  int peer = -1;            // the peer whose link misbehaves; -1 for every peer
  uint64_t afterBytes = 0;  // bytes sent over the faulty link(s) untouched before the fault
  std::chrono::milliseconds delay{0};  // kDelay; kJitter's longest
  uint64_t seed = 0;                   // kJitter only
};

// The fault the environment asks for, if any: CHORUS_FAULT_DELAY_MS=N makes every transport of
// this process a FaultyTransport with a kJitter fault of at most N ms on every link, seeded with
// the rank (createTransport applies it; see transport/registry.h). For tests only.
std::optional<Fault> faultFromEnvironment(int rank);

class FaultyTransport final : public Transport {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, Fault fault);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int worldRank(int member) const override { return inner_->worldRank(member); }
  std::string_view name() const override { return inner_->name(); }
  void postSend(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                const void* data,
                size_t bytes,
                Request& request) override;
  void postRecv(int peer,
                uint64_t tag,
                const Fingerprint& fingerprint,
                void* data,
                size_t bytes,
                Request& request) override;
  void wait(std::span<Request* const> requests, Deadline deadline) override;
  bool waitSome(std::span<Request* const> requests, Deadline deadline) override;
  void interrupt() noexcept override { inner_->interrupt(); }
  void wake() noexcept override { inner_->wake(); }
  void poll() override { inner_->poll(); }
  void pollWhileWaiting(detail::FunctionRef<bool()> poll) override {
    inner_->pollWhileWaiting(poll);
  }
  void abort(std::exception_ptr reason) noexcept override { inner_->abort(reason); }
  void close() noexcept override { inner_->close(); }
  std::exception_ptr failure() const override { return inner_->failure(); }

 private:
  bool faultApplies(int peer, size_t bytes);

  std::unique_ptr<Transport> inner_;
  Fault fault_;
  uint64_t bytesSent_ = 0;                // over the faulty link(s), all peers together
  std::mt19937_64 random_;                // kJitter's delays
  std::unordered_set<Request*> dropped_;  // sends completed here, never handed on
  std::vector<Request*> forwarded_;       // scratch for wait()
};

}  // namespace chorus::transport::faulty
