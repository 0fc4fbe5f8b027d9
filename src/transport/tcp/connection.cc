// One connection of the TCP transport: framing, per-peer matching and non-blocking progress.
// See connection.h.
//
// Reads: headers and small payloads are read in bulk through a 64 KiB buffer (one recv for many
// small frames); once a large payload's receive is known, its bytes are read straight into the
// receive's buffer (no copy). A message that arrives before its receive is read into a buffer of
// its own, and copied once when the receive is posted (if the receive is posted while the message
// is still arriving, the rest streams straight into the receive's buffer). That buffer starts at
// up to kFirstUnexpectedBytes (1 MiB) and doubles as bytes arrive (messages over 1 MiB pay about
// one more copy): the size in a header is the peer's claim, and memory follows what was actually
// sent, so a corrupt or hostile header cannot make this process reserve a terabyte. A buffer is at
// least kSmallestUnexpectedBuffer (4 KiB), and the record that holds it is reused for a later
// message (PeerMatching keeps a few, with buffers up to kKeptUnexpectedBytes). Each connection
// starts with a few such records, with 4 KiB each: messages of up to 4 KiB that arrive early never
// allocate; a larger one allocates the first time a record meets its size, and not after. Room for
// a few waiting receives and queued frames is also made up front (a new maximum would allocate).
// Writes: queued frames go out with one sendmsg of up to kMaxIov pieces, header and payload
// together, so small messages cost one system call.
#include "transport/tcp/connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/check.h"
#include "core/copy_bytes.h"

namespace chorus::transport::tcp {
namespace {

constexpr size_t kHeaderBytes = sizeof(FrameHeader);
constexpr size_t kInBufferBytes = 64 * 1024;
// Payload remainders at least this large are read straight into their destination.
constexpr size_t kDirectReadMin = 16 * 1024;
// Bytes read per readSome() call, so one busy peer cannot starve the others.
constexpr size_t kReadBudget = 16 << 20;
constexpr int kMaxIov = 64;
constexpr size_t kFirstUnexpectedBytes = 1 << 20;
constexpr size_t kSmallestUnexpectedBuffer = 4096;
// Outgoing frames with room made up front: how many queue at once depends on the scheduler.
constexpr size_t kReservedOutFrames = 16;
constexpr size_t kZeroBytes = 64 * 1024;
const char kZeros[kZeroBytes] = {};

bool isDisconnect(int error) {
  return error == EPIPE || error == ECONNRESET || error == ECONNABORTED || error == ETIMEDOUT ||
         error == EHOSTUNREACH || error == ENETUNREACH || error == ENOTCONN;
}

}  // namespace

Connection::Connection(int peer, int selfName, int peerName, net::Socket socket)
    : peer_(peer),
      selfName_(selfName),
      peerName_(peerName),
      socket_(std::move(socket)),
      inBuffer_(std::make_unique_for_overwrite<char[]>(kInBufferBytes)) {
  socket_.setNonBlocking(true);
  out_.reserve(kReservedOutFrames);
  matching_.prepareSpares([](Unexpected& message) {
    message.payload = std::make_unique_for_overwrite<char[]>(kSmallestUnexpectedBuffer);
    message.capacity = kSmallestUnexpectedBuffer;
  });
}

Connection::Event Connection::send(Op& op) {
  if (state_ != State::kOpen)
    return Event::kNone;  // the transport fails the request in wait()
  OutFrame frame;
  frame.header.magic = kFrameMagic;
  frame.header.kind = FrameKind::kData;
  frame.header.tag = op.tag;
  frame.header.bytes = op.bytes;
  frame.header.fingerprint = op.fingerprint;
  frame.payload = op.data;
  frame.op = &op;
  bool idle = out_.empty();
  out_.push_back(std::move(frame));
  return idle ? writeSome() : Event::kNone;
}

void Connection::recv(Op& op) {
  Unexpected* message = matching_.findMessage(op.tag);
  if (message == nullptr) {
    matching_.addReceive(&op);
    return;
  }
  checkMatch(selfName_, peerName_, op.fingerprint, op.bytes, message->header.fingerprint,
             message->header.bytes);
  if (message->complete) {
    copyBytes(op.data, message->payload.get(), op.bytes);
    op.complete = true;
  } else {
    // It is the frame being read now: take what came, and let the rest stream into op's buffer.
    size_t got = op.bytes - remaining_;
    copyBytes(op.data, message->payload.get(), got);
    sink_ = Sink::kUser;
    recvOp_ = &op;
    dest_ = op.data + got;
  }
  matching_.removeMessage(message);
}

void Connection::queueControl(FrameKind kind, std::vector<uint8_t> payload) {
  OutFrame frame;
  frame.header.magic = kFrameMagic;
  frame.header.kind = kind;
  frame.header.bytes = payload.size();
  frame.owned = std::move(payload);
  frame.payload = reinterpret_cast<const char*>(frame.owned.data());
  out_.push_back(std::move(frame));
  // The vector's buffer does not move with it, so `payload` stays valid.
}

Connection::Event Connection::readSome() {
  if (dropped_)
    return Event::kNone;
  size_t budget = kReadBudget;
  while (state_ == State::kOpen || state_ == State::kSaidGoodbye) {
    if (inBegin_ < inEnd_) {
      Event event = consumeBuffered();
      if (event != Event::kNone)
        return event;
      continue;
    }
    if (budget == 0)
      return Event::kNone;  // level-triggered epoll brings us back
    bool direct = inPayload_ && remaining_ >= kDirectReadMin;
    size_t want = direct ? remaining_ : kInBufferBytes;
    if (direct && sink_ == Sink::kUnexpected) {
      growUnexpected(kDirectReadMin);
      const Unexpected& message = matching_.newestMessage();
      want = std::min(want, message.capacity - (message.header.bytes - remaining_));
    }
    char* target = direct ? dest_ : inBuffer_.get();
    ssize_t got = ::recv(fd(), target, want, 0);
    if (got == 0)
      return endOfStream();
    if (got < 0) {
      int error = errno;
      if (error == EINTR)
        continue;
      if (error == EAGAIN || error == EWOULDBLOCK)
        return Event::kNone;
      if (isDisconnect(error))
        return endOfStream();
      detail::throwSystemError("recv", error, __FILE__, __LINE__);
    }
    size_t bytes = static_cast<size_t>(got);
    // A short read drained the socket: handle what came and let epoll say when there is more,
    // rather than spend a system call to hear EAGAIN.
    budget = bytes < want ? 0 : budget - std::min(budget, bytes);
    if (!direct) {
      inBegin_ = 0;
      inEnd_ = bytes;
      continue;
    }
    dest_ += bytes;
    remaining_ -= bytes;
    if (remaining_ == 0) {
      Event event = finishPayload();
      if (event != Event::kNone)
        return event;
    }
  }
  return Event::kNone;
}

Connection::Event Connection::consumeBuffered() {
  while (inBegin_ < inEnd_) {
    size_t available = inEnd_ - inBegin_;
    const char* from = inBuffer_.get() + inBegin_;
    if (!inPayload_) {
      size_t take = std::min(available, kHeaderBytes - headerGot_);
      std::memcpy(reinterpret_cast<char*>(&inHeader_) + headerGot_, from, take);
      inBegin_ += take;
      headerGot_ += take;
      if (headerGot_ < kHeaderBytes)
        continue;
      headerGot_ = 0;
      Event event = onHeader();
      if (event != Event::kNone)
        return event;
    } else {
      size_t take = std::min(available, remaining_);
      if (sink_ == Sink::kUnexpected)
        growUnexpected(take);
      copyBytes(dest_, from, take);
      dest_ += take;
      remaining_ -= take;
      inBegin_ += take;
      if (remaining_ > 0)
        continue;
      Event event = finishPayload();
      if (event != Event::kNone)
        return event;
    }
  }
  return Event::kNone;
}

Connection::Event Connection::onHeader() {
  const FrameHeader& header = inHeader_;
  auto malformed = [this](const std::string& what) {
    return PeerError(detail::concat("rank ", selfName_, " (this process): rank ", peerName_,
                                    " sent a malformed frame (", what,
                                    "); is another program or chorus version connected?"),
                     peerName_);
  };
  if (header.magic != kFrameMagic)
    throw malformed(detail::concat("magic ", header.magic));
  switch (header.kind) {
    case FrameKind::kData: {
      if (Op* op = matching_.takeReceive(header.tag)) {
        checkMatch(selfName_, peerName_, op->fingerprint, op->bytes, header.fingerprint,
                   header.bytes);
        sink_ = Sink::kUser;
        recvOp_ = op;
        dest_ = recvOp_->data;
        break;
      }
      if (header.bytes > kMaxUnexpectedBytes) {
        throw malformed(detail::concat("a message of ", header.bytes, " bytes"));
      }
      matching_.bufferMessage().header = header;
      sink_ = Sink::kUnexpected;
      remaining_ = header.bytes;
      growUnexpected(std::min<uint64_t>(header.bytes, kFirstUnexpectedBytes));
      break;
    }
    case FrameKind::kAbort:
      if (header.bytes > kMaxAbortBytes) {
        throw malformed(detail::concat("an abort notice of ", header.bytes, " bytes"));
      }
      abortPayload_.resize(header.bytes);
      dest_ = reinterpret_cast<char*>(abortPayload_.data());
      sink_ = Sink::kAbort;
      break;
    case FrameKind::kGoodbye:
      if (header.bytes != 0)
        throw malformed("a goodbye with a payload");
      state_ = State::kSaidGoodbye;
      return Event::kGoodbye;
    default:
      throw malformed(detail::concat("frame kind ", static_cast<int>(header.kind)));
  }
  inPayload_ = true;
  remaining_ = header.bytes;
  return remaining_ == 0 ? finishPayload() : Event::kNone;
}

void Connection::growUnexpected(size_t more) {
  Unexpected& message = matching_.newestMessage();
  const size_t got = message.header.bytes - remaining_;
  if (got + more > message.capacity) {  // a reused record may have room already
    const size_t capacity = std::max<size_t>(
        kSmallestUnexpectedBuffer,
        std::min<uint64_t>(message.header.bytes, std::max(got + more, 2 * message.capacity)));
    std::unique_ptr<char[]> grown;
    try {
      grown = std::make_unique_for_overwrite<char[]>(capacity);
    } catch (const std::bad_alloc&) {
      throw Error(detail::concat("rank ", selfName_, " (this process): out of memory buffering a ",
                                 message.header.bytes, "-byte message from rank ", peerName_,
                                 " that arrived before its receive was posted"));
    }
    if (got > 0)
      std::memcpy(grown.get(), message.payload.get(), got);
    message.payload = std::move(grown);
    message.capacity = capacity;
  }
  dest_ = message.payload.get() + got;
}

Connection::Event Connection::finishPayload() {
  inPayload_ = false;
  dest_ = nullptr;
  switch (sink_) {
    case Sink::kUser:
      recvOp_->complete = true;
      recvOp_ = nullptr;
      return Event::kNone;
    case Sink::kUnexpected:
      matching_.newestMessage().complete = true;
      return Event::kNone;
    case Sink::kAbort:
      return Event::kAbort;
  }
  return Event::kNone;
}

Connection::Event Connection::endOfStream() {
  if (state_ == State::kSaidGoodbye) {
    state_ = State::kClosed;  // the transport takes the socket out of epoll, then closes it
    return Event::kClosed;
  }
  state_ = State::kCrashed;
  return Event::kCrashed;
}

Connection::Event Connection::writeSome() {
  while (wantsWrite()) {
    iovec iov[kMaxIov];
    int count = 0;
    size_t total = 0;
    for (OutFrame& frame : out_) {
      if (count + 2 > kMaxIov)
        break;
      if (frame.sent < kHeaderBytes) {
        iov[count++] = {reinterpret_cast<char*>(&frame.header) + frame.sent,
                        kHeaderBytes - frame.sent};
      }
      size_t payloadDone = frame.sent > kHeaderBytes ? frame.sent - kHeaderBytes : 0;
      size_t payloadLeft = frame.header.bytes - payloadDone;
      bool whole = true;
      if (payloadLeft > 0 && frame.payload != nullptr) {
        iov[count++] = {const_cast<char*>(frame.payload) + payloadDone, payloadLeft};
      } else if (payloadLeft > 0) {
        size_t zeros = std::min(payloadLeft, kZeroBytes);
        iov[count++] = {const_cast<char*>(kZeros), zeros};
        whole = zeros == payloadLeft;
      }
      if (!whole)
        break;
    }
    for (int i = 0; i < count; ++i) total += iov[i].iov_len;
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = static_cast<size_t>(count);
    ssize_t sent = ::sendmsg(fd(), &message, MSG_NOSIGNAL);
    if (sent < 0) {
      int error = errno;
      if (error == EINTR)
        continue;
      if (error == EAGAIN || error == EWOULDBLOCK)
        return Event::kNone;
      // The read side sees the same end and tells a goodbye from a crash; stop writing.
      if (isDisconnect(error)) {
        writeBroken_ = true;
        return Event::kNone;
      }
      detail::throwSystemError("sendmsg", error, __FILE__, __LINE__);
    }
    accept(static_cast<size_t>(sent));
    if (static_cast<size_t>(sent) < total)
      return Event::kNone;  // the socket is full
  }
  return Event::kNone;
}

void Connection::accept(size_t bytes) {
  while (bytes > 0) {
    OutFrame& frame = out_.front();
    size_t left = kHeaderBytes + frame.header.bytes - frame.sent;
    size_t take = std::min(bytes, left);
    frame.sent += take;
    bytes -= take;
    if (take == left) {
      if (frame.op != nullptr)
        frame.op->complete = true;
      out_.pop_front();
    }
  }
}

void Connection::dropRequests() {
  dropped_ = true;
  matching_.dropReceives();
  recvOp_ = nullptr;
  detail::RecyclingQueue<OutFrame> kept;
  for (OutFrame& frame : out_) {
    if (frame.op == nullptr) {
      kept.push_back(std::move(frame));
    } else if (frame.sent > 0) {
      frame.payload = nullptr;  // finish it with zeros
      frame.op = nullptr;
      kept.push_back(std::move(frame));
    }
  }
  out_ = std::move(kept);
}

void Connection::flushAndClose(Deadline deadline) noexcept {
  if (!socket_.valid())
    return;
  try {
    while (wantsWrite()) {
      writeSome();
      if (!wantsWrite() || deadline.expired())
        break;
      pollfd entry{fd(), POLLOUT, 0};
      if (::poll(&entry, 1, deadline.pollTimeoutMs()) < 0 && errno != EINTR)
        break;
    }
  } catch (...) {
    // best effort: the peer will see the connection end instead
  }
  ::shutdown(fd(), SHUT_WR);
  // Drain what the peer sent, so that closing sends FIN, not RST (which could destroy our goodbye
  // before the peer reads it).
  for (int i = 0; i < 64; ++i) {
    if (::recv(fd(), inBuffer_.get(), kInBufferBytes, MSG_DONTWAIT) <= 0)
      break;
  }
  closeNow();
}

void Connection::closeNow() noexcept {
  socket_.close();
  state_ = State::kClosed;
}

}  // namespace chorus::transport::tcp
