// The shared-memory transport. See transport.h; the contract is in src/transport/transport.h.
// This file is only how bytes move; posting, the wait loop, the failure latch and abort() are the
// transport core's (transport/core.h), which calls the hooks here; receives meet their messages
// through transport/matching.h.
//
// Design: every rank owns one segment (shm/segment.h) holding its control words and one inbound
// ring per peer (shm/ring.h); shm/bootstrap.h maps them all and removes every name, so after setup
// nothing is left in /dev/shm even after kill -9. A message is a 56-byte MessageHeader (magic,
// flags, tag, byte count, Fingerprint) followed by its payload, streamed through the ring
// in pieces of at most kPiece bytes, so a message of any size passes a ring of fixed size.
//
// Note [Direct messages]: a message too large for the ring (with its header), to a receiver that
// can read this rank's memory (its segment says directReads kYes: it probed every peer with
// process_vm_readv at setup, core/cross_memory.h), sends only its header, with the payload's
// address. The receiver copies the payload straight from the sender's memory into the posted
// receive (or into an unexpected-message buffer, so it never waits for a receive to be posted),
// then counts it in the ring's directDone and rings the sender, whose send completes then (its
// buffer is no longer read). One copy instead of two through the ring: about twice the bandwidth
// of large messages. Messages after it go on streaming meanwhile; direct sends complete in order,
// as the receiver reads headers in order. Only messages that could not complete without their
// receiver anyway go direct: one that fits the ring still completes as soon as it is in it.
//  - A sender that fails or closes (its buffers may then be freed) first revokes its direct sends
//    (the ring's directRevoked, then a fence). The receiver checks it before and after each copy
//    (seqlock style) and delivers no revoked message: its receive stays open, and fails as the
//    sender's failure or goodbye says.
//  - The copy runs with this transport's lock held (abort() from another thread waits for it).
//  - Memory the kernel will not read for another process (VM_IO or VM_PFNMAP mappings: some
//    driver-mapped buffers) fails the transport with an error that says so.
//
//  - Sends to one peer go out in the order posted, one at a time; a send completes when its last
//    byte is in the ring (eager: small messages complete inside postSend), or a direct one when
//    its receiver has copied it (Note [Direct messages]).
//  - The receiver reads each header as it arrives and matches it with the first receive posted
//    for (peer, tag), comparing fingerprint and byte count before touching the payload. A message
//    with no receive yet is copied into an unexpected-message buffer, so it never blocks messages
//    of other tags behind it; a receive posted while its message is still streaming in takes the
//    rest directly.
//  - wait() moves bytes on every ring, in both directions, until its requests complete: two ranks
//    sending each other large messages both progress. With nothing to do it spins for kSpin, then
//    sleeps on its doorbell (Note [Doorbell]) in slices of kSlice, after which it checks the
//    deadline and whether peers still live (kill(pid, 0)); abort() from another thread rings it.
//  - Failure: an abort notice (detail::encodeError) goes into this rank's segment, then the state
//    word says kAborted and every peer's doorbell rings. close() sets kGoodbye after the last
//    bytes; a receiver first drains the ring, then fails requests on that peer with PeerError.
//    A peer whose state says kCrashed (test hook) or whose process is gone fails the transport.
//
// Cost: per message a 56-byte header and two copies (into the ring, out of it; one for direct
// messages, plus a process_vm_readv call per 2 MiB); one atomic add on
// the receiver's doorbell per pass that moved bytes; a futex system call only when the other side
// sleeps. Memory: size - 1 rings of ringBytesFor(size) (1 MiB up to 16 ranks) per rank,
// pre-faulted. An idle wait sleeps; a process with zombie peers (killed but not reaped) only sees
// them die when reaped, as kill(pid, 0) still finds a zombie; ranks in separate PID namespaces
// cannot be watched.
#include "transport/shm/transport.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/check.h"
#include "core/copy_bytes.h"
#include "core/cross_memory.h"
#include "core/error_codec.h"
#include "core/process_watch.h"
#include "transport/core.h"
#include "transport/matching.h"
#include "transport/shm/bootstrap.h"

namespace chorus::transport::shm {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Note [Spinning]: with nothing to do, wait() first spins with a pause instruction for kPauseSpin
// (one way takes ~0.2 us when both ranks run on their own cores), then calls sched_yield until
// kSpin, then sleeps on the futex. The yield matters when ranks share cores (more ranks than
// cores, or a busy node): a pure spin holds the core the peer needs to answer. Measured on a
// loaded 2-core VM, 8-byte one-way latency: 15 us with a pure 10 us spin, 3.3 us with yielding.
// Falling asleep adds a futex wake (several us) to the next message.
constexpr microseconds kPauseSpin{1};
constexpr microseconds kSpin{10};
// A rank whose direct sends wait for their receivers' copy (Note [Direct messages]) yields longer
// before it sleeps, kDirectSpin per kDirectSpinBytes waiting (at least once): the copy ends soon (4
// MiB take ~0.4 ms here), and a futex wake would add its latency to every large send.
constexpr microseconds kDirectSpin{1000};
constexpr uint64_t kDirectSpinBytes = 4 << 20;
// Sleep at most this long at a time, to check the deadline and peer processes.
constexpr milliseconds kSlice{50};
// Bytes copied before publishing them to the other side, so both copy at once on large messages.
constexpr uint64_t kPiece = 256 * 1024;

// Tells the CPU this is a spin loop (frees the core's pipeline for its sibling hyperthread).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// A direct message's header is followed by the payload's address in the sender (8 bytes) instead
// of the payload; a streamed one's by its payload, so that streamed messages lie in the ring as
// they always have (copy speeds depend on where they land).
struct MessageHeader {
  static constexpr uint32_t kMagic = 0x6d736763;  // "msgc"
  static constexpr uint32_t kDirect = 1;          // the payload stays in the sender's memory
  uint32_t magic = kMagic;
  uint32_t flags = 0;
  uint64_t tag = 0;
  uint64_t bytes = 0;
  Fingerprint fingerprint;
};
static_assert(sizeof(MessageHeader) == 56);

struct Op : PostedOp {
  size_t moved = 0;  // payload bytes written to (send) or read from (receive) the ring
  bool headerSent = false;
  uint64_t directNumber = 0;  // a direct send: its number among the link's (from 1)
};

// Early messages up to this size leave their buffer to the next one (PeerMatching reuses
// records), so that a warmed exchange allocates nothing even when its messages beat their
// receives; larger buffers are freed.
constexpr uint64_t kKeptUnexpectedBytes = 4 << 20;

// A message that arrived before its receive was posted.
struct Unexpected {
  MessageHeader header;
  std::unique_ptr<char[]> data;
  uint64_t capacity = 0;  // of data
  uint64_t received = 0;
  bool complete() const { return received == header.bytes; }
  uint64_t tag() const { return header.tag; }
  // A buffer for `bytes`: the one kept, if large enough.
  void reserve(uint64_t bytes) {
    if (data == nullptr || capacity < bytes) {
      capacity = std::max<uint64_t>(bytes, 1);
      data.reset(new char[capacity]);
    }
  }
  // Ready for the next message; a buffer of up to kKeptUnexpectedBytes stays for it.
  void recycle() {
    header = MessageHeader{};
    received = 0;
    if (capacity > kKeptUnexpectedBytes) {
      data.reset();
      capacity = 0;
    }
  }
};

// The message streaming in from one peer: into a posted receive or into an Unexpected buffer.
struct Incoming {
  bool active = false;
  MessageHeader header;
  uint64_t received = 0;
  Op* op = nullptr;
  Unexpected* buffer = nullptr;
};

// Everything this rank keeps about one peer.
struct Link {
  Ring outbound;           // in the peer's segment: this rank writes
  Ring inbound;            // in this rank's segment: the peer writes
  std::vector<Op*> sends;  // in posting order; the front one is streaming
  // Direct sends whose header went out, until the peer has read their payload (in order).
  std::vector<Op*> directSends;
  uint64_t directPosted = 0;            // direct sends whose header went out, ever
  uint64_t directReceived = 0;          // direct headers read from the peer, ever
  const SegmentHeader* peer = nullptr;  // the peer's segment header (its pid, its directReads)
  PeerMatching<Op, Unexpected> matching;
  Incoming incoming;
  bool left = false;  // said goodbye and everything it sent has been read
};

class ShmTransport final : public TransportCore<Op> {
 public:
  ShmTransport(int rank,
               int size,
               detail::RankNames names,
               std::vector<Segment> segments,
               std::optional<bool> peersReadable);
  ~ShmTransport() override { close(); }

  std::string_view name() const override { return "shm"; }

 private:
  void startSend(Op& op) override;
  void startRecv(Op& op) override;
  void beginWait() override;
  std::optional<uint64_t> bufferedSendTag(int peer) override {
    const Unexpected* message = links_[peer].matching.firstMessage();
    if (message == nullptr || message->header.fingerprint.collective != Collective::kPointToPoint)
      return std::nullopt;
    return message->tag();
  }
  void progress() override { moved_ = progressAll(); }
  bool peerLeft(int peer) const override { return links_[peer].left; }
  bool hasMessageFrom(int peer, uint64_t tag) override {
    return links_[peer].matching.findMessage(tag) != nullptr;
  }
  void checkForDeadPeers() override { checkPeersAlive(); }
  void idle(Deadline deadline, Clock::time_point now, std::unique_lock<std::mutex>& lock) override;
  void onFailure(std::exception_ptr error, bool tellPeers) noexcept override;
  void wakeWaiter() noexcept override;
  void sayGoodbye() noexcept override;
  void vanish() noexcept override;

  void matchUnexpected(Link& link, Op& op);
  bool progressAll();
  bool progressPeer(int peer);
  bool writeSends(Link& link);
  bool completeDirectSends(Link& link);
  void probePeers(std::optional<bool> peersReadable);
  bool readIncoming(int peer, Link& link);
  void readDirect(int peer, Link& link, uint64_t address);
  void dropIncoming(Link& link);
  void startIncoming(Link& link, const MessageHeader& header);
  void finishIncoming(Link& link);
  void checkPeerState(int peer, PeerState state);
  void checkPeersAlive();
  void sleep(Deadline deadline, std::unique_lock<std::mutex>& lock);
  void ringAll() noexcept;
  void publishState(PeerState state) noexcept;
  SegmentHeader& own() const { return segments_[rank()].header(); }

  std::vector<Segment> segments_;            // by rank; this rank's own at rank()
  std::vector<Link> links_;                  // by rank; this rank's slot unused
  std::vector<ProcessWatch> peerProcesses_;  // by rank; this rank's slot unused
  detail::CrossMemoryReader reader_;         // direct messages' payloads (under the lock)
  uint64_t directBytes_ = 0;                 // of the direct sends in every link's directSends

  // The state of one wait(), between the passes of its loop (Note [Spinning]).
  bool moved_ = false;        // the last pass moved bytes
  bool waitStarted_ = false;  // the wait has idled once: spinUntil_ and the check are set
  Clock::time_point spinUntil_;
  Clock::time_point nextLivenessCheck_;
};

ShmTransport::ShmTransport(int rank,
                           int size,
                           detail::RankNames names,
                           std::vector<Segment> segments,
                           std::optional<bool> peersReadable)
    : TransportCore(rank, size, std::move(names)), segments_(std::move(segments)), links_(size) {
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank)
      continue;
    links_[peer].outbound = segments_[peer].ring(rank);
    links_[peer].inbound = segments_[rank].ring(peer);
    links_[peer].peer = &segments_[peer].header();
    links_[peer].directSends.reserve(4);
    links_[peer].matching.shareAnyPeerReceives(peer, &anyPeerReceives());
  }
  peerProcesses_.resize(size);
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank)
      peerProcesses_[peer] = ProcessWatch(segments_[peer].header().pid);
  }
  probePeers(peersReadable);
}

// Says in this rank's segment whether it reads its peers' large messages straight from their
// memory (Note [Direct messages]): only if it can read every peer, as `peersReadable` says or else
// a probe of each finds. Until then its senders stream.
void ShmTransport::probePeers(std::optional<bool> peersReadable) {
  if (peersReadable.has_value()) {
    own().directReads.store(*peersReadable && detail::CrossMemoryReader::enabled()
                                ? SegmentHeader::kYes
                                : SegmentHeader::kNo,
                            std::memory_order_release);
    return;
  }
  bool every = detail::CrossMemoryReader::enabled();
  for (int peer = 0; every && peer < size(); ++peer) {
    const SegmentHeader& theirs = segments_[peer].header();
    every = peer == rank() || detail::CrossMemoryReader::canRead(theirs.pid, theirs.probeAddress,
                                                                 SegmentHeader::kProbeValue);
  }
  own().directReads.store(every ? SegmentHeader::kYes : SegmentHeader::kNo,
                          std::memory_order_release);
}

void ShmTransport::startSend(Op& op) {
  op.moved = 0;
  op.headerSent = false;
  Link& link = links_[op.peer];
  link.sends.push_back(&op);
  if (link.sends.size() == 1 && !link.left && writeSends(link))
    segments_[op.peer].ringDoorbell();
}

void ShmTransport::startRecv(Op& op) {
  op.moved = 0;
  op.headerSent = false;
  matchUnexpected(links_[op.peer], op);
}

// A new receive takes the first buffered message of its tag (complete, or still streaming in:
// then the rest goes straight to the receive's buffer), else waits in link.recvs.
void ShmTransport::matchUnexpected(Link& link, Op& op) {
  Unexpected* message = link.matching.findMessage(op.tag);
  if (message == nullptr) {
    link.matching.addReceive(&op);
    return;
  }
  checkMatch(worldRank(rank()), worldRank(op.peer), op.fingerprint, op.bytes,
             message->header.fingerprint, message->header.bytes);
  copyBytes(op.data, message->data.get(), message->received);
  op.moved = message->received;
  if (message->complete()) {
    op.complete = true;
  } else {
    link.incoming.buffer = nullptr;  // it is the message streaming in now
    link.incoming.op = &op;
  }
  link.matching.removeMessage(message);
}

bool ShmTransport::progressAll() {
  bool moved = false;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank() && progressPeer(peer))
      moved = true;
  }
  return moved;
}

// Moves what can move on both rings with `peer`; rings its doorbell if anything did. Throws when
// the peer aborted or crashed.
bool ShmTransport::progressPeer(int peer) {
  Link& link = links_[peer];
  if (link.left)
    return false;
  // Read the state first: everything the peer wrote before saying goodbye is then in the ring.
  auto state =
      static_cast<PeerState>(segments_[peer].header().state.load(std::memory_order_acquire));
  checkPeerState(peer, state);
  bool moved = readIncoming(peer, link);
  if (state == PeerState::kGoodbye) {
    // Its reads of this rank's direct sends counted before its goodbye: they completed. The rest
    // it will never read (they fail as sends to a peer that left).
    completeDirectSends(link);
    for (const Op* op : link.directSends) directBytes_ -= op->bytes;
    link.directSends.clear();
    link.left = true;  // the ring is drained: readIncoming never leaves bytes behind
    return moved;
  }
  if (writeSends(link))
    moved = true;
  if (!link.directSends.empty() && completeDirectSends(link))
    moved = true;
  if (moved)
    segments_[peer].ringDoorbell();
  return moved;
}

// Completes the direct sends whose payload the peer has read. True if any did.
bool ShmTransport::completeDirectSends(Link& link) {
  const uint64_t done = link.outbound.control()->directDone.load(std::memory_order_acquire);
  bool completed = false;
  while (!link.directSends.empty() && link.directSends.front()->directNumber <= done) {
    Op& op = *link.directSends.front();
    op.moved = op.bytes;
    op.complete = true;
    link.directSends.erase(link.directSends.begin());
    directBytes_ -= op.bytes;
    completed = true;
  }
  return completed;
}

void ShmTransport::checkPeerState(int peer, PeerState state) {
  if (state == PeerState::kCrashed) {
    fail(std::make_exception_ptr(makeCrashedPeerError(worldRank(rank()), worldRank(peer))),
         /*tellPeers=*/false);
    rethrowFailure();
  }
  if (state == PeerState::kAborted) {
    const SegmentHeader& header = segments_[peer].header();
    uint32_t bytes = std::min<uint32_t>(header.abortBytes, SegmentHeader::kAbortCapacity);
    std::vector<uint8_t> notice(header.abortNotice, header.abortNotice + bytes);
    fail(decodeAbortNotice(worldRank(rank()), worldRank(peer), notice), /*tellPeers=*/false);
    rethrowFailure();
  }
}

// Streams the queued sends into the peer's ring, front first, in pieces. True if bytes went in.
bool ShmTransport::writeSends(Link& link) {
  Ring& ring = link.outbound;
  bool wrote = false;
  while (!link.sends.empty()) {
    Op& op = *link.sends.front();
    // Enough for the header, a direct message's address and the rest of the payload, if it fits.
    const uint64_t wanted = std::min<uint64_t>(
        ring.capacity(), sizeof(MessageHeader) + sizeof(uint64_t) + (op.bytes - op.moved));
    uint64_t space = ring.freeBytes(wanted);
    if (!op.headerSent) {
      const bool direct =
          sizeof(MessageHeader) + op.bytes > ring.capacity() &&
          link.peer->directReads.load(std::memory_order_acquire) == SegmentHeader::kYes;
      const uint64_t address = reinterpret_cast<uintptr_t>(op.data);
      if (space < sizeof(MessageHeader) + (direct ? sizeof(address) : 0))
        break;
      MessageHeader header;
      header.tag = op.tag;
      header.bytes = op.bytes;
      header.fingerprint = op.fingerprint;
      header.flags = direct ? MessageHeader::kDirect : 0;
      ring.put(&header, sizeof(header));
      space -= sizeof(header);
      if (direct) {
        ring.put(&address, sizeof(address));
        space -= sizeof(address);
      }
      op.headerSent = true;
      wrote = true;
      if (direct) {  // complete once the peer has read it (completeDirectSends)
        op.directNumber = ++link.directPosted;
        link.directSends.push_back(&op);
        directBytes_ += op.bytes;
        link.sends.erase(link.sends.begin());
        continue;
      }
    }
    while (op.moved < op.bytes && space > 0) {
      uint64_t piece = std::min({space, kPiece, static_cast<uint64_t>(op.bytes - op.moved)});
      ring.put(op.data + op.moved, piece);
      ring.publish();
      op.moved += piece;
      space -= piece;
      wrote = true;
    }
    if (op.moved < op.bytes)
      break;
    op.complete = true;
    link.sends.erase(link.sends.begin());
  }
  if (wrote)
    ring.publish();
  return wrote;
}

// Reads everything the peer has put in the ring: headers, then payloads into their receive or an
// unexpected-message buffer. True if bytes came out. Throws MismatchError on a mismatch.
bool ShmTransport::readIncoming(int peer, Link& link) {
  Ring& ring = link.inbound;
  Incoming& incoming = link.incoming;
  bool read = false;
  while (true) {
    uint64_t available = ring.available();
    if (!incoming.active) {
      if (available < sizeof(MessageHeader))
        break;
      MessageHeader header;
      ring.take(&header, sizeof(header));
      read = true;
      if (header.magic != MessageHeader::kMagic) {
        throw PeerError(detail::concat("rank ", worldRank(rank()),
                                       " (this process): the shared-memory ring from rank ",
                                       worldRank(peer), " holds garbage (bad message magic)"),
                        worldRank(peer));
      }
      startIncoming(link, header);
      available -= sizeof(header);
      if ((header.flags & MessageHeader::kDirect) != 0) {
        uint64_t address = 0;  // published with the header
        if (available < sizeof(address)) {
          throw PeerError(
              detail::concat("rank ", worldRank(rank()),
                             " (this process): the shared-memory ring from rank ", worldRank(peer),
                             " holds garbage (a direct message "
                             "without its address)"),
              worldRank(peer));
        }
        ring.take(&address, sizeof(address));
        available -= sizeof(address);
        readDirect(peer, link, address);
      }
    }
    while (incoming.received < incoming.header.bytes && available > 0) {
      uint64_t piece = std::min({available, kPiece, incoming.header.bytes - incoming.received});
      char* target = incoming.op != nullptr ? incoming.op->data : incoming.buffer->data.get();
      ring.take(target + incoming.received, piece);
      ring.release();
      incoming.received += piece;
      if (incoming.buffer != nullptr)
        incoming.buffer->received = incoming.received;
      available -= piece;
      read = true;
    }
    if (incoming.received < incoming.header.bytes)
      break;
    finishIncoming(link);
  }
  if (read)
    ring.release();
  return read;
}

void ShmTransport::startIncoming(Link& link, const MessageHeader& header) {
  Incoming& incoming = link.incoming;
  incoming = Incoming{true, header, 0, nullptr, nullptr};
  if (Op* op = link.matching.takeReceive(header.tag)) {
    checkMatch(worldRank(rank()), worldRank(op->peer), op->fingerprint, op->bytes,
               header.fingerprint, header.bytes);  // before touching the payload
    incoming.op = op;
    return;
  }
  Unexpected& message = link.matching.bufferMessage();
  message.header = header;
  message.reserve(header.bytes);
  incoming.buffer = &message;
}

// Copies a direct message's payload out of the sender's memory (Note [Direct messages]) into its
// receive or buffer, then counts it done for the sender; drops it if the sender revoked it.
void ShmTransport::readDirect(int peer, Link& link, uint64_t address) {
  Incoming& incoming = link.incoming;
  const uint64_t number = ++link.directReceived;
  std::atomic<uint64_t>& revoked = link.inbound.control()->directRevoked;
  if (revoked.load(std::memory_order_acquire) >= number)
    return dropIncoming(link);
  char* target = incoming.op != nullptr ? incoming.op->data : incoming.buffer->data.get();
  const int error = reader_.read(link.peer->pid, target, address, incoming.header.bytes);
  // Seqlock style: a sender that revoked before changing or freeing its buffer is seen here.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (revoked.load(std::memory_order_relaxed) >= number)
    return dropIncoming(link);
  if (error != 0) {
    checkPeersAlive();  // a peer that died explains it best
    throw PeerError(
        detail::concat("rank ", worldRank(rank()), " (this process): ",
                       error == ESRCH
                           ? "rank " + std::to_string(worldRank(peer)) +
                                 " died (or was killed) while this rank read its " +
                                 std::to_string(incoming.header.bytes) + "-byte message"
                           : "reading a " + std::to_string(incoming.header.bytes) +
                                 "-byte message from rank " + std::to_string(worldRank(peer)) +
                                 "'s memory failed: " + std::strerror(error) +
                                 " (set CHORUS_SHM_DIRECT=0 to copy through shared "
                                 "memory)"),
        worldRank(peer));
  }
  // A sender killed before it could revoke, its pid then reused: what was read is not its memory.
  if (peerProcesses_[peer].gone())
    checkPeersAlive();  // throws, naming it
  incoming.received = incoming.header.bytes;
  if (incoming.buffer != nullptr)
    incoming.buffer->received = incoming.received;
  link.inbound.control()->directDone.fetch_add(1, std::memory_order_release);
}

// Forgets the message coming in, which its sender revoked: its receive (if one took it) stays
// open, and its buffer (if none did) goes.
void ShmTransport::dropIncoming(Link& link) {
  Incoming& incoming = link.incoming;
  if (incoming.buffer != nullptr)
    link.matching.removeMessage(incoming.buffer);
  incoming.op = nullptr;
  incoming.buffer = nullptr;
  incoming.received = incoming.header.bytes;  // readIncoming then finishes it, delivering nothing
}

void ShmTransport::finishIncoming(Link& link) {
  Incoming& incoming = link.incoming;
  if (incoming.op != nullptr) {
    incoming.op->moved = incoming.received;
    incoming.op->complete = true;
  }
  incoming = Incoming{};
}

void ShmTransport::checkPeersAlive() {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank() || links_[peer].left)
      continue;
    if (peerProcesses_[peer].gone()) {
      fail(std::make_exception_ptr(makeCrashedPeerError(worldRank(rank()), worldRank(peer))),
           /*tellPeers=*/false);
      rethrowFailure();
    }
  }
}

// The wait's clock starts at its first idle pass (Note [One clock read per pass]): a wait that
// ends in its first pass, as a small send's does, reads no clock.
void ShmTransport::beginWait() {
  moved_ = false;
  waitStarted_ = false;
}

// Checks every kSlice that the peers still live, then spins, yields or sleeps (Note [Spinning]).
void ShmTransport::idle(Deadline deadline,
                        Clock::time_point now,
                        std::unique_lock<std::mutex>& lock) {
  if (!waitStarted_) {
    waitStarted_ = true;
    spinUntil_ = now + kSpin;
    nextLivenessCheck_ = now + kSlice;
  }
  if (now >= nextLivenessCheck_) {
    checkPeersAlive();
    nextLivenessCheck_ = now + kSlice;
  }
  if (moved_) {
    spinUntil_ = now + kSpin;
  } else if (now < spinUntil_ - kSpin + kPauseSpin) {
    cpuRelax();
  } else if (now < spinUntil_ ||
             (directBytes_ > 0 &&
              now < spinUntil_ + kDirectSpin * (1 + directBytes_ / kDirectSpinBytes))) {
    ::sched_yield();  // lets a peer that shares this core run (Note [Spinning])
  } else {
    sleep(deadline, lock);
  }
}

// Sleeps on this rank's doorbell until a peer rings it, abort() or interrupt() does, or a slice
// passes. Drops the lock meanwhile, so abort() from another thread can get in.
void ShmTransport::sleep(Deadline deadline, std::unique_lock<std::mutex>& lock) {
  const Segment& self = segments_[rank()];
  uint32_t seen = self.prepareToSleep();
  if (abortRequested() || interruptRequested() || wakeRequested() || progressAll()) {
    self.stayAwake();
    return;
  }
  auto limit = std::min<microseconds>(
      kSlice, std::chrono::duration_cast<microseconds>(deadline.at() - Clock::now()));
  lock.unlock();
  if (limit.count() > 0)
    self.sleepUntilRung(seen, limit);
  else
    self.stayAwake();
  lock.lock();
}

void ShmTransport::ringAll() noexcept {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank())
      segments_[peer].ringDoorbell();
  }
}

void ShmTransport::publishState(PeerState state) noexcept {
  uint32_t open = static_cast<uint32_t>(PeerState::kOpen);
  own().state.compare_exchange_strong(open, static_cast<uint32_t>(state), std::memory_order_release,
                                      std::memory_order_relaxed);
  ringAll();
}

void ShmTransport::onFailure(std::exception_ptr error, bool tellPeers) noexcept {
  for (Link& link : links_) {
    link.sends.clear();
    if (!link.directSends.empty()) {  // their buffers may go once this returns: revoke them
      link.outbound.control()->directRevoked.store(link.directPosted, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    for (const Op* op : link.directSends) directBytes_ -= op->bytes;
    link.directSends.clear();
    link.matching.dropReceives();
    link.incoming.op = nullptr;
  }
  if (tellPeers && size() > 1) {
    try {
      std::vector<uint8_t> notice = detail::encodeError(error);
      size_t bytes = std::min(notice.size(), SegmentHeader::kAbortCapacity);
      std::memcpy(own().abortNotice, notice.data(), bytes);
      own().abortBytes = static_cast<uint32_t>(bytes);
      publishState(PeerState::kAborted);
    } catch (...) {
      // Cannot describe the error: the peers will see this rank leave instead.
    }
  }
  if (size() > 1)
    segments_[rank()].ringDoorbell();  // wakes this rank's own waiter (abort() from another thread)
}

void ShmTransport::wakeWaiter() noexcept {
  if (size() > 1)
    segments_[rank()].ringDoorbell();
}

void ShmTransport::sayGoodbye() noexcept {
  if (size() > 1)
    publishState(PeerState::kGoodbye);  // after the last bytes written; kept if aborted
}

void ShmTransport::vanish() noexcept {
  if (size() > 1)
    publishState(PeerState::kCrashed);
}

}  // namespace

std::unique_ptr<Transport> createShmTransport(const TransportOptions& options) {
  auto segments = connectSegments(options);
  return std::make_unique<ShmTransport>(options.rank, options.size, options.names,
                                        std::move(segments), options.peersReadable);
}

void crashForTesting(Transport& transport) {
  auto* shm = dynamic_cast<ShmTransport*>(&transport);
  CHORUS_CHECK_ARG(shm != nullptr, "crashForTesting needs a shm transport, not ", transport.name());
  shm->crash();
}

}  // namespace chorus::transport::shm
