// FaultyTransport: see transport.h.
#include "transport/faulty/transport.h"

#include <thread>

#include "core/check.h"
#include "core/env.h"
#include "transport/loopback/transport.h"
#include "transport/shm/transport.h"
#include "transport/tcp/transport.h"

namespace chorus::transport::faulty {
namespace {

void crash(Transport& transport) {
  if (transport.name() == "loopback")
    loopback::crashForTesting(transport);
  else if (transport.name() == "shm")
    shm::crashForTesting(transport);
  else if (transport.name() == "tcp")
    tcp::crashForTesting(transport);
  else
    throw UnsupportedError(detail::concat("FaultyTransport cannot crash a '", transport.name(),
                                          "' transport (tcp, shm and loopback can)"));
}

}  // namespace

FaultyTransport::FaultyTransport(std::unique_ptr<Transport> inner, Fault fault)
    : inner_(std::move(inner)), fault_(fault), random_(fault.seed) {
  CHORUS_CHECK_ARG(fault.peer >= -1 && fault.peer < inner_->size() && fault.peer != inner_->rank(),
                   "FaultyTransport: the fault's peer ", fault.peer, " is not another rank");
}

bool FaultyTransport::faultApplies(int peer, size_t bytes) {
  if (fault_.peer != -1 && fault_.peer != peer)
    return false;
  const bool applies =
      bytesSent_ + bytes > fault_.afterBytes || (bytes == 0 && bytesSent_ >= fault_.afterBytes);
  bytesSent_ += bytes;
  return applies;
}

void FaultyTransport::postSend(int peer,
                               uint64_t tag,
                               const Fingerprint& fingerprint,
                               const void* data,
                               size_t bytes,
                               Request& request) {
  if (!faultApplies(peer, bytes)) {
    inner_->postSend(peer, tag, fingerprint, data, bytes, request);
    return;
  }
  switch (fault_.kind) {
    case Fault::Kind::kDelay:
      std::this_thread::sleep_for(fault_.delay);
      inner_->postSend(peer, tag, fingerprint, data, bytes, request);
      return;
    case Fault::Kind::kJitter: {
      std::uniform_int_distribution<int64_t> delay(0, fault_.delay.count());
      std::this_thread::sleep_for(std::chrono::milliseconds(delay(random_)));
      inner_->postSend(peer, tag, fingerprint, data, bytes, request);
      return;
    }
    case Fault::Kind::kDrop:
      request = Request{peer, true};
      dropped_.insert(&request);
      return;
    case Fault::Kind::kTruncate:
      inner_->postSend(peer, tag, fingerprint, data, bytes / 2, request);
      return;
    case Fault::Kind::kClose:
      inner_->close();
      break;
    case Fault::Kind::kCrash:
      crash(*inner_);
      break;
  }
  inner_->postSend(peer, tag, fingerprint, data, bytes, request);  // fails as a closed one does
}

void FaultyTransport::postRecv(int peer,
                               uint64_t tag,
                               const Fingerprint& fingerprint,
                               void* data,
                               size_t bytes,
                               Request& request) {
  inner_->postRecv(peer, tag, fingerprint, data, bytes, request);
}

void FaultyTransport::wait(std::span<Request* const> requests, Deadline deadline) {
  if (dropped_.empty()) {
    inner_->wait(requests, deadline);
    return;
  }
  forwarded_.clear();
  for (Request* request : requests) {
    if (dropped_.erase(request) == 0)
      forwarded_.push_back(request);
  }
  inner_->wait(forwarded_, deadline);
}

bool FaultyTransport::waitSome(std::span<Request* const> requests, Deadline deadline) {
  if (dropped_.empty())
    return inner_->waitSome(requests, deadline);
  forwarded_.clear();
  bool droppedOne = false;  // a dropped send is done at once
  for (Request* request : requests) {
    if (dropped_.erase(request) == 0)
      forwarded_.push_back(request);
    else
      droppedOne = true;
  }
  return droppedOne || inner_->waitSome(forwarded_, deadline);
}

std::optional<Fault> faultFromEnvironment(int rank) {
  const std::optional<long long> milliseconds = env::integer("CHORUS_FAULT_DELAY_MS");
  if (!milliseconds || *milliseconds == 0)
    return std::nullopt;
  CHORUS_CHECK_ARG(*milliseconds > 0,
                   "CHORUS_FAULT_DELAY_MS must be a number of milliseconds, not ", *milliseconds);
  Fault fault;
  fault.kind = Fault::Kind::kJitter;
  fault.delay = std::chrono::milliseconds(*milliseconds);
  fault.seed = static_cast<uint64_t>(rank) + 1;
  return fault;
}

}  // namespace chorus::transport::faulty
