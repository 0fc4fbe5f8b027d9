// The TCP store's frame encoding (see tcp_store_protocol.h).
#include "store/tcp_store_protocol.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/net/socket.h"
#include "store/tcp_store.h"

namespace chorus::store::protocol {
namespace {

constexpr size_t kFirstChunkBytes = 64 * 1024;

}  // namespace

Writer& Writer::u8(uint8_t value) {
  buffer_.push_back(value);
  return *this;
}

Writer& Writer::u32(uint32_t value) {
  for (int i = 0; i < 4; ++i) buffer_.push_back(static_cast<uint8_t>(value >> (8 * i)));
  return *this;
}

Writer& Writer::i64(int64_t value) {
  auto bits = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) buffer_.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  return *this;
}

Writer& Writer::bytes(const uint8_t* data, size_t size) {
  CHORUS_CHECK_ARG(size <= kMaxFrameBytes, "a store value or key of ", size,
                   " bytes is over the TCP store's limit of ", kMaxFrameBytes, " bytes");
  u32(static_cast<uint32_t>(size));
  buffer_.insert(buffer_.end(), data, data + size);
  return *this;
}

Writer& Writer::string(const std::string& value) {
  return bytes(reinterpret_cast<const uint8_t*>(value.data()), value.size());
}

Writer& Writer::strings(const std::vector<std::string>& values) {
  CHORUS_CHECK_ARG(values.size() <= kMaxFrameBytes, "too many store keys in one request");
  u32(static_cast<uint32_t>(values.size()));
  for (const auto& value : values) string(value);
  return *this;
}

const std::vector<uint8_t>& Writer::frame() {
  size_t payload = buffer_.size() - 4;
  CHORUS_CHECK_ARG(payload <= kMaxFrameBytes, "a TCP store request of ", payload,
                   " bytes is over the limit of ", kMaxFrameBytes,
                   " bytes; store large data elsewhere and put only its location in the store");
  for (int i = 0; i < 4; ++i) buffer_[i] = static_cast<uint8_t>(payload >> (8 * i));
  return buffer_;
}

const uint8_t* Reader::take(size_t size) {
  if (size > left_) {
    throw ProtocolError(::chorus::detail::concat("malformed TCP store message: a field of ", size,
                                                 " bytes overruns the frame (", left_,
                                                 " bytes left)"));
  }
  const uint8_t* at = data_;
  data_ += size;
  left_ -= size;
  return at;
}

uint8_t Reader::u8() { return *take(1); }

uint32_t Reader::u32() {
  const uint8_t* in = take(4);
  return uint32_t(in[0]) | uint32_t(in[1]) << 8 | uint32_t(in[2]) << 16 | uint32_t(in[3]) << 24;
}

int64_t Reader::i64() {
  const uint8_t* in = take(8);
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits |= uint64_t(in[i]) << (8 * i);
  return static_cast<int64_t>(bits);
}

Bytes Reader::bytes() {
  uint32_t size = u32();
  const uint8_t* in = take(size);
  return Bytes(in, in + size);
}

std::string Reader::string() {
  uint32_t size = u32();
  const uint8_t* in = take(size);
  return std::string(reinterpret_cast<const char*>(in), size);
}

std::vector<std::string> Reader::strings() {
  uint32_t count = u32();
  // Each string takes at least its 4-byte length, so a count the payload cannot hold is rejected
  // before anything is allocated for it.
  if (count > left_ / 4) {
    throw ProtocolError(::chorus::detail::concat("malformed TCP store message: ", count,
                                                 " keys cannot fit in ", left_, " bytes"));
  }
  std::vector<std::string> values;
  values.reserve(count);
  for (uint32_t i = 0; i < count; ++i) values.push_back(string());
  return values;
}

void Reader::expectEnd() const {
  if (left_ != 0) {
    throw ProtocolError(::chorus::detail::concat("malformed TCP store message: ", left_,
                                                 " unexpected bytes at the end"));
  }
}

Request decodeRequest(const std::vector<uint8_t>& payload) {
  Reader reader(payload);
  Request request;
  request.op = static_cast<Op>(reader.u8());
  switch (request.op) {
    case Op::kSet:
      request.key = reader.string();
      request.value = reader.bytes();
      break;
    case Op::kGet:
      request.key = reader.string();
      request.deadline = fromTimeoutMs(reader.i64());
      break;
    case Op::kAdd:
      request.key = reader.string();
      request.delta = reader.i64();
      break;
    case Op::kCompareSet:
      request.key = reader.string();
      request.value = reader.bytes();
      request.desired = reader.bytes();
      break;
    case Op::kWait:
      request.keys = reader.strings();
      request.deadline = fromTimeoutMs(reader.i64());
      break;
    case Op::kCheck:
      request.keys = reader.strings();
      break;
    case Op::kErase:
      request.key = reader.string();
      break;
    default:
      throw ProtocolError(::chorus::detail::concat("unknown TCP store request type ",
                                                   int(static_cast<uint8_t>(request.op))));
  }
  reader.expectEnd();
  return request;
}

void sendFrame(int fd, Writer& writer, Deadline deadline) {
  const std::vector<uint8_t>& frame = writer.frame();
  net::sendAll(fd, frame.data(), frame.size(), deadline);
}

std::vector<uint8_t> recvFrame(int fd, Deadline headerDeadline, Deadline bodyDeadline) {
  uint8_t header[4];
  net::recvAll(fd, header, sizeof(header), headerDeadline);
  uint32_t size = uint32_t(header[0]) | uint32_t(header[1]) << 8 | uint32_t(header[2]) << 16 |
                  uint32_t(header[3]) << 24;
  if (size > kMaxFrameBytes) {
    throw ProtocolError(::chorus::detail::concat("a TCP store frame announced ", size,
                                                 " bytes, over the limit of ", kMaxFrameBytes));
  }
  // The payload grows as its bytes arrive (doubling, from 64 KiB), so memory follows what the peer
  // sent rather than what its length prefix claims: a peer that announces kMaxFrameBytes and then
  // stalls or hangs up holds no more than it sent.
  std::vector<uint8_t> payload;
  while (payload.size() < size) {
    size_t got = payload.size();
    size_t next = std::min<size_t>(size - got, std::max<size_t>(got, kFirstChunkBytes));
    payload.resize(got + next);
    net::recvAll(fd, payload.data() + got, next, bodyDeadline);
  }
  return payload;
}

int64_t toTimeoutMs(Deadline deadline) {
  if (deadline.isNever())
    return -1;
  // Rounded up, so that the server never gives up before the caller's deadline.
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline.at() - Clock::now());
  return std::max<int64_t>(left.count(), 0);
}

Deadline fromTimeoutMs(int64_t timeoutMs) {
  constexpr int64_t kHundredYearsMs = 100ll * 365 * 24 * 3600 * 1000;
  if (timeoutMs < 0 || timeoutMs > kHundredYearsMs)
    return Deadline::never();
  return Deadline::after(std::chrono::milliseconds(timeoutMs));
}

}  // namespace chorus::store::protocol
