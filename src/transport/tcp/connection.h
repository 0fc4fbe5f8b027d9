// One TCP connection of the transport's mesh: framing, the per-peer matching of receives to
// messages, and non-blocking progress in both directions. The transport (tcp/transport.cc) owns
// the epoll loop, the requests and the failure state; a Connection only moves bytes when told the
// socket is ready, and reports what it saw.
//
// Wire format: each message is a FrameHeader followed by `bytes` of payload. Data frames carry a
// tag and the sender's Fingerprint; abort frames carry an error encoded by detail::encodeError;
// a goodbye frame (no payload) says the peer closed on purpose. Both ends are assumed to have the
// same byte order (headers are raw structs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/net/socket.h"
#include "core/recycling_queue.h"
#include "transport/matching.h"
#include "transport/op_pool.h"
#include "transport/transport.h"

namespace chorus::transport::tcp {

enum class FrameKind : uint8_t { kData = 1, kAbort = 2, kGoodbye = 3 };

struct FrameHeader {
  uint32_t magic = 0;
  FrameKind kind = FrameKind::kData;
  uint8_t reserved[3] = {};
  uint64_t tag = 0;
  uint64_t bytes = 0;
  Fingerprint fingerprint;
};
static_assert(sizeof(FrameHeader) == 56);

inline constexpr uint32_t kFrameMagic = 0x46524843;  // "CHRF"
// Larger messages that arrive before their receive are refused as a protocol error. Below it, the
// buffer of such a message grows as its bytes arrive, so a header alone commits no memory.
inline constexpr uint64_t kMaxUnexpectedBytes = uint64_t{1} << 40;
// The largest buffer a reused record of an unexpected message keeps for the next one.
inline constexpr size_t kKeptUnexpectedBytes = size_t{1} << 20;
inline constexpr uint64_t kMaxAbortBytes = uint64_t{1} << 20;

// A posted send or receive, owned by the transport while pending.
struct Op : PostedOp {};

class Connection {
 public:
  enum class State {
    kOpen,         // healthy
    kSaidGoodbye,  // the peer closed on purpose; what it sent before is still delivered
    kClosed,       // the stream ended after goodbye, or we closed
    kCrashed,      // the peer vanished without goodbye
  };
  // What reading or writing found; the transport turns it into failures.
  enum class Event { kNone, kGoodbye, kAbort, kCrashed, kClosed };

  // `peer` indexes the transport's connections; `selfName` and `peerName` are the world ranks
  // its errors name (Note [One rank numbering]).
  Connection(int peer, int selfName, int peerName, net::Socket socket);

  int fd() const { return socket_.fd(); }
  int peer() const { return peer_; }
  State state() const { return state_; }
  bool wantsWrite() const { return !out_.empty() && state_ == State::kOpen && !writeBroken_; }

  // Queues a data frame and writes what the socket takes now.
  Event send(Op& op);
  // Matches the oldest buffered message with op's tag, or waits for one. Throws MismatchError.
  void recv(Op& op);
  // Messages that find no receive of this peer waiting also look in `any` (matching.h).
  void shareAnyPeerReceives(AnyPeerReceives<Op>* any) {
    matching_.shareAnyPeerReceives(peer_, any);
  }
  // Whether a message with `tag` waits buffered for its receive.
  bool hasMessage(uint64_t tag) { return matching_.findMessage(tag) != nullptr; }
  // The tag of the first message that waits for its receive, when it is a send's (not a
  // collective's); none otherwise.
  std::optional<uint64_t> bufferedSendTag() const {
    const Unexpected* message = matching_.firstMessage();
    if (message == nullptr || message->header.fingerprint.collective != Collective::kPointToPoint)
      return std::nullopt;
    return message->tag();
  }
  // Queues an abort or goodbye frame.
  void queueControl(FrameKind kind, std::vector<uint8_t> payload);

  // Progress, when epoll says the socket is ready. readSome throws MismatchError, or PeerError for
  // a malformed frame; both return kAbort once an abort frame is complete (see takeAbortPayload).
  Event readSome();
  Event writeSome();
  std::vector<uint8_t> takeAbortPayload() { return std::move(abortPayload_); }

  // Forgets every request: user buffers are not touched again. A half-written frame is finished
  // with zeros so the peer can still parse what follows (an abort or goodbye).
  void dropRequests();
  // Writes queued frames until done or `deadline`, drains what the peer sent, and closes.
  void flushAndClose(Deadline deadline) noexcept;
  // Closes the socket at once, without goodbye (tests use this to play a crash).
  void closeNow() noexcept;

 private:
  enum class Sink { kUser, kUnexpected, kAbort };
  struct OutFrame {
    FrameHeader header;
    const char* payload = nullptr;  // null: zeros (padding after dropRequests)
    size_t sent = 0;                // bytes of header and payload written
    Op* op = nullptr;               // data frames of a live request
    std::vector<uint8_t> owned;     // control frames own their payload
  };
  struct Unexpected {
    FrameHeader header;
    std::unique_ptr<char[]> payload;  // grows as bytes arrive, up to header.bytes
    size_t capacity = 0;
    bool complete = false;
    uint64_t tag() const { return header.tag; }
    // Ready for the next message (PeerMatching reuses records): a buffer of up to
    // kKeptUnexpectedBytes stays for it.
    void recycle() {
      header = FrameHeader{};
      complete = false;
      if (capacity > kKeptUnexpectedBytes) {
        payload.reset();
        capacity = 0;
      }
    }
  };

  Event consumeBuffered();
  Event onHeader();
  Event finishPayload();
  Event endOfStream();
  // Makes room for `more` bytes in the unexpected message being read (see Note in connection.cc).
  void growUnexpected(size_t more);
  void accept(size_t bytes);

  int peer_;
  int selfName_;
  int peerName_;
  net::Socket socket_;
  State state_ = State::kOpen;
  bool writeBroken_ = false;  // the peer is gone; the read side reports how
  bool dropped_ = false;      // after dropRequests(): nothing is read any more

  // Outgoing frames in order; the front one may be partly written.
  detail::RecyclingQueue<OutFrame> out_;

  // Incoming: receives waiting for a message, messages waiting for a receive.
  PeerMatching<Op, Unexpected> matching_;
  // The frame being read: its header, then `remaining` payload bytes into `dest`.
  FrameHeader inHeader_;
  size_t headerGot_ = 0;
  bool inPayload_ = false;
  Sink sink_ = Sink::kUser;
  Op* recvOp_ = nullptr;
  char* dest_ = nullptr;
  size_t remaining_ = 0;
  std::vector<uint8_t> abortPayload_;
  // Small frames are read in bulk through this buffer; large payloads go straight to `dest`.
  std::unique_ptr<char[]> inBuffer_;
  size_t inBegin_ = 0;
  size_t inEnd_ = 0;
};

}  // namespace chorus::transport::tcp
