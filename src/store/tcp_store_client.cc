// TcpStore: the client Store of the TCP store server (see tcp_store.h and tcp_store_protocol.h).
//
// One connection, authenticated at construction, carries one request at a time under a mutex.
// Requests that wait (get, wait) carry the caller's remaining time so that the server does the
// waiting; the socket I/O itself gives up a little later (kIoMargin), so a dead or hung server is
// still noticed. Requests that do not wait use CHORUS_TIMEOUT (default 300 s) as their I/O bound.
// After any transport failure the connection is out of step with the server, so it is marked broken
// and every later request fails at once with the same error.
#include <atomic>

#include "core/check.h"
#include "core/env.h"
#include "core/error_codec.h"
#include "core/net/handshake.h"
#include "store/store_util.h"
#include "store/tcp_store.h"
#include "store/tcp_store_protocol.h"

namespace chorus::store {
namespace {

using namespace std::chrono_literals;
using protocol::Op;
using protocol::Reader;
using protocol::Status;
using protocol::Writer;

constexpr auto kIoMargin = 5s;
constexpr auto kDefaultTimeout = 300s;

const char* opName(Op op) {
  switch (op) {
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compareSet";
    case Op::kWait:
      return "wait";
    case Op::kCheck:
      return "check";
    case Op::kErase:
      return "erase";
  }
  return "unknown";
}

}  // namespace

struct TcpStore::Impl {
  net::Address address;
  std::string where;  // "the store at host:port"
  std::chrono::milliseconds ioTimeout{kDefaultTimeout};
  std::mutex mutex;
  net::Socket socket;
  std::exception_ptr broken;  // set once the connection failed

  // Sends `request` and returns the OK reply's payload; TIMEOUT and ERROR replies are thrown.
  // `waitDeadline` is the deadline the server waits until (never for requests that do not wait).
  std::vector<uint8_t> roundTrip(Op op, Writer& request, Deadline waitDeadline);
  std::vector<uint8_t> exchange(Op op, Writer& request, Deadline ioDeadline);
};

std::vector<uint8_t> TcpStore::Impl::exchange(Op op, Writer& request, Deadline ioDeadline) {
  try {
    protocol::sendFrame(socket.fd(), request, ioDeadline);
    return protocol::recvFrame(socket.fd(), ioDeadline, ioDeadline);
  } catch (const PeerError&) {
    broken = std::make_exception_ptr(PeerError(
        ::chorus::detail::concat(where, " closed the connection (did the launcher exit?)"), -1));
  } catch (const TimeoutError&) {
    broken = std::make_exception_ptr(TimeoutError(::chorus::detail::concat(
        where, " did not answer a ", opName(op),
        " request in time; it may be overloaded or hung (is the launcher still running?)")));
  } catch (const protocol::ProtocolError& error) {
    broken = std::make_exception_ptr(
        Error(::chorus::detail::concat(where, " sent a malformed reply: ", error.what())));
  }
  std::rethrow_exception(broken);
}

std::vector<uint8_t> TcpStore::Impl::roundTrip(Op op, Writer& request, Deadline waitDeadline) {
  request.frame();  // a request over the size limit is the caller's error, before any I/O
  std::lock_guard<std::mutex> lock(mutex);
  if (broken)
    std::rethrow_exception(broken);
  Deadline ioDeadline = Deadline::after(ioTimeout);
  if (op == Op::kGet || op == Op::kWait) {
    ioDeadline =
        waitDeadline.isNever() ? Deadline::never() : Deadline(waitDeadline.at() + kIoMargin);
  }
  std::vector<uint8_t> reply = exchange(op, request, ioDeadline);
  try {
    Reader reader(reply);
    auto status = static_cast<Status>(reader.u8());
    if (status == Status::kOk)
      return std::vector<uint8_t>(reply.begin() + 1, reply.end());
    if (status == Status::kTimeout)
      throwMissingKeys(reader.strings(), where);
    if (status == Status::kError) {
      std::rethrow_exception(detail::decodeError(reader.bytes(), where + ": ", -1));
    }
    throw protocol::ProtocolError(
        ::chorus::detail::concat("unknown reply status ", int(static_cast<uint8_t>(status))));
  } catch (const protocol::ProtocolError& error) {
    broken = std::make_exception_ptr(
        Error(::chorus::detail::concat(where, " sent a malformed reply: ", error.what())));
    std::rethrow_exception(broken);
  }
}

TcpStore::TcpStore(const net::Address& address, std::string token, Deadline deadline)
    : impl_(std::make_unique<Impl>()) {
  CHORUS_CHECK_ARG(!token.empty(), "connecting to the TCP store at ", address.toString(),
                   " needs the job token, got an empty one");
  impl_->address = address;
  impl_->where = "the store at " + address.toString();
  if (auto timeout = env::seconds("CHORUS_TIMEOUT"))
    impl_->ioTimeout = *timeout;
  impl_->socket = net::connectTcp(address, deadline);
  try {
    net::clientHandshake(impl_->socket.fd(), token, "store", 0, deadline);
  } catch (const PeerError&) {
    throw PeerError(
        ::chorus::detail::concat(impl_->where,
                                 " closed the connection during the handshake; it may hold "
                                 "a different job token (is it another job's store?)"),
        -1);
  }
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, const Bytes& value) {
  Writer request;
  request.u8(uint8_t(Op::kSet)).string(key).bytes(value);
  impl_->roundTrip(Op::kSet, request, Deadline::never());
}

Bytes TcpStore::get(const std::string& key, Deadline deadline) {
  Writer request;
  request.u8(uint8_t(Op::kGet)).string(key).i64(protocol::toTimeoutMs(deadline));
  std::vector<uint8_t> reply = impl_->roundTrip(Op::kGet, request, deadline);
  Reader reader(reply);
  Bytes value = reader.bytes();
  reader.expectEnd();
  return value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Writer request;
  request.u8(uint8_t(Op::kAdd)).string(key).i64(delta);
  std::vector<uint8_t> reply = impl_->roundTrip(Op::kAdd, request, Deadline::never());
  Reader reader(reply);
  int64_t value = reader.i64();
  reader.expectEnd();
  return value;
}

Bytes TcpStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Writer request;
  request.u8(uint8_t(Op::kCompareSet)).string(key).bytes(expected).bytes(desired);
  std::vector<uint8_t> reply = impl_->roundTrip(Op::kCompareSet, request, Deadline::never());
  Reader reader(reply);
  Bytes value = reader.bytes();
  reader.expectEnd();
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  Writer request;
  request.u8(uint8_t(Op::kWait)).strings(keys).i64(protocol::toTimeoutMs(deadline));
  impl_->roundTrip(Op::kWait, request, deadline);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Writer request;
  request.u8(uint8_t(Op::kCheck)).strings(keys);
  std::vector<uint8_t> reply = impl_->roundTrip(Op::kCheck, request, Deadline::never());
  Reader reader(reply);
  uint8_t present = reader.u8();
  reader.expectEnd();
  return present != 0;
}

bool TcpStore::erase(const std::string& key) {
  Writer request;
  request.u8(uint8_t(Op::kErase)).string(key);
  std::vector<uint8_t> reply = impl_->roundTrip(Op::kErase, request, Deadline::never());
  Reader reader(reply);
  uint8_t existed = reader.u8();
  reader.expectEnd();
  return existed != 0;
}

std::string TcpStore::localAddress() const { return net::localAddress(impl_->socket); }

}  // namespace chorus::store
