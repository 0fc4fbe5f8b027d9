// The TCP store's request/reply encoding, shared by the server and the client.
//
// After the handshake (Note [Authenticated handshake], purpose "store"), each request and each
// reply is one frame: a 4-byte little-endian payload length, then the payload. Inside a payload,
// integers are little-endian, and strings and byte strings are a u32 length then the bytes.
//
// clang-format off
//   request = op (u8) | fields                         reply = status (u8) | fields
//     kSet         key, value                            kOk       op-specific result:
//     kGet         key, timeout ms (i64, -1 = never)       kGet, kCompareSet: value; kAdd: i64;
//     kAdd         key, delta (i64)                        kCheck, kErase: u8 (0 or 1); else none
//     kCompareSet  key, expected, desired                kTimeout  missing keys (u32 count,
//     kWait        keys (u32 count, strings), timeout ms           strings)
//     kCheck       keys                                  kError    error (bytes, from
//     kErase       key                                             detail::encodeError)
// clang-format on
//
// A Reader never reads past its payload: a short or inconsistent payload is a ProtocolError, and
// the server drops that connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "core/deadline.h"
#include "store/store.h"

namespace chorus::store::protocol {

enum class Op : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait, kCheck, kErase };
enum class Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

class ProtocolError : public Error {
 public:
  using Error::Error;
};

// Builds one frame; the length prefix is filled in by frame().
class Writer {
 public:
  Writer() : buffer_(4, 0) {}
  Writer& u8(uint8_t value);
  Writer& i64(int64_t value);
  Writer& u32(uint32_t value);
  Writer& bytes(const uint8_t* data, size_t size);
  Writer& bytes(const Bytes& value) { return bytes(value.data(), value.size()); }
  Writer& string(const std::string& value);
  Writer& strings(const std::vector<std::string>& values);
  // The finished frame (length prefix + payload). A payload over kMaxFrameBytes is
  // InvalidArgumentError: the caller asked to store too much at once.
  const std::vector<uint8_t>& frame();

 private:
  std::vector<uint8_t> buffer_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& payload)
      : data_(payload.data()), left_(payload.size()) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  Bytes bytes();
  std::string string();
  std::vector<std::string> strings();
  // Throws ProtocolError if any payload bytes are left over.
  void expectEnd() const;

 private:
  const uint8_t* take(size_t size);
  const uint8_t* data_;
  size_t left_;
};

// One request, decoded. Only the fields of its op are set (see the table at the top).
struct Request {
  Op op = Op::kSet;
  std::string key;                        // every op but kWait and kCheck
  std::vector<std::string> keys;          // kWait, kCheck
  Bytes value;                            // kSet: the value; kCompareSet: the expected value
  Bytes desired;                          // kCompareSet
  int64_t delta = 0;                      // kAdd
  Deadline deadline = Deadline::never();  // kGet, kWait: from the request's timeout
};
// Decodes one request payload. A short, long or unknown request is ProtocolError. Pure: the
// server's only parser of client bytes, and what the fuzz targets (fuzz/) feed arbitrary bytes.
Request decodeRequest(const std::vector<uint8_t>& payload);

// Sends a finished frame.
void sendFrame(int fd, Writer& writer, Deadline deadline);
// Receives one frame's payload. The length prefix must arrive by `headerDeadline` and the rest by
// `bodyDeadline`; a length over kMaxFrameBytes is ProtocolError (nothing more is read). Memory is
// allocated as the payload arrives, not up front from the length prefix.
std::vector<uint8_t> recvFrame(int fd, Deadline headerDeadline, Deadline bodyDeadline);

// A deadline as the timeout carried in a request (milliseconds left, -1 for never), and back.
int64_t toTimeoutMs(Deadline deadline);
Deadline fromTimeoutMs(int64_t timeoutMs);

}  // namespace chorus::store::protocol
