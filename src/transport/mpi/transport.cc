// The MPI transport. This file is only how bytes move; posting, the wait loop, the failure latch
// and abort() are the transport core's (transport/core.h), which calls the hooks here.
//
// Every chorus message is a header (magic, bytes, chorus tag, Fingerprint) and
// its payload, sent with MPI_Isend on a private duplicate of the caller's communicator. Payloads
// up to kInlineBytes travel inside the header's message (one MPI message); larger ones follow it as
// separate messages of at most kChunkBytes on the same (peer, MPI tag), which MPI's non-overtaking
// rule keeps in order.
//
// Receiving: the receives posted for one (peer, MPI tag) form a queue; only its head has a header
// MPI_Irecv posted. When that header arrives it is checked (fingerprint, byte count: a
// MismatchError, see Note [Collective fingerprint]) and only then are the payload receives posted
// straight into the caller's buffer, followed by the next head's header receive, so MPI's ordered
// matching gives the k-th receive the k-th message. Messages that arrive early wait in MPI's own
// unexpected-message queue.
//
// Tags: MPI tag 0 carries control notices (abort, goodbye), 1 + k the collective tag
// kCollectiveTag + k (k < 1024), and 1025 + t the point-to-point tag t. The full chorus tag is also
// in the header, and checked.
//
// Progress: there is no progress thread and no blocking MPI call with a timeout, so wait() tests
// every pending MPI request (and probes the control tag) in a loop, yielding the CPU (sched_yield)
// between passes, until its requests are done or the deadline passes (TimeoutError naming the
// peers of unfinished requests). Cost: one MPI message per small chorus message (header + up to
// kInlineBytes, copied once on each side), 1 + ceil(bytes / kChunkBytes) for large ones (no copy);
// a waiting thread spins on one core.
//
// Failure: the first error is kept; pending MPI requests are cancelled (receives for good; Open MPI
// cannot cancel sends, but a send is only read, and its peer fails too) and given a short while to
// finish, after which they are freed and their internal buffers deliberately leaked; errors found
// here are sent to every peer as an abort notice (encodeError), which their wait() raises as an
// error of the same type. close() sends a goodbye notice; requests that involve a peer that said
// goodbye fail with PeerError (after kGoodbyeGrace, in which messages it sent before leaving may
// still land). close() then retires the duplicate (Note [Retiring an MPI communicator]). A dead
// peer is normally handled by mpirun, which aborts the whole job.
//
// Threads: one mutex serializes this transport's MPI calls (wait() drops it between passes, so
// abort() from another thread gets in); other threads calling MPI at the same time need MPI
// initialized with MPI_THREAD_MULTIPLE.
#include "transport/mpi/transport.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "connector/mpi_environment.h"
#include "core/check.h"
#include "core/error_codec.h"
#include "core/mpi_tag_halves.h"
#include "core/stall_watch.h"
#include "transport/core.h"

namespace chorus::transport::mpi {
namespace {

constexpr int kControlTag = 0;
constexpr int kFirstCollectiveMpiTag = 1;
constexpr uint64_t kCollectiveMpiTags = 1024;  // kCollectiveTag + k for k below this
constexpr int kFirstUserMpiTag = kFirstCollectiveMpiTag + static_cast<int>(kCollectiveMpiTags);
constexpr uint32_t kMagic = 0x4d504943;  // "MPIC"
constexpr size_t kInlineBytes = 4096;
constexpr size_t kChunkBytes = size_t{1} << 30;
constexpr uint8_t kAbortNotice = 1;
constexpr uint8_t kGoodbyeNotice = 2;
// How long pending requests get to finish after a failure before they are freed.
constexpr std::chrono::milliseconds kCancelTimeout{200};
// Receive queues kept (empty ones included) before the empty ones are swept: peers x the tags in
// use, which collectives keep to a few.
constexpr size_t kMaxRecvQueues = 4096;
constexpr size_t kQueuedReceives = 8;
// Ops made with their buffers at setup (OpPool::prepare): a collective step has a send and a
// receive per peer in flight, and sends may linger until MPI reports them done.
constexpr size_t kPreparedOps = 8;
// How long close() gives its notices to leave.
constexpr std::chrono::milliseconds kGoodbyeTimeout{1000};
// How long after a goodbye a request involving that peer may still complete.
constexpr std::chrono::milliseconds kGoodbyeGrace{200};

struct Header {
  uint32_t magic;
  uint32_t reserved;
  uint64_t bytes;
  uint64_t tag;
  Fingerprint fingerprint;
};
static_assert(sizeof(Header) == 56);

using connector::checkMpi;
using connector::mpiFinalized;

enum class Stage : uint8_t { kQueued, kHeader, kPayload };

struct Op : PostedOp {
  Stage stage = Stage::kQueued;
  int mpiTag = 0;
  std::vector<MPI_Request> mpiRequests;  // sends: header + chunks; receives: header, then chunks
  std::vector<char> buffer;              // the header message (with an inline payload)
};

// Note [Retiring an MPI communicator]
// Open MPI reuses a freed communicator's context id for the next one, and a message that arrives
// for a freed communicator is replayed into its successor with a stale sequence number, which
// breaks the successor's message order. Every close() leaves such messages in flight (the goodbyes
// of peers that close later; abort notices). So a closed transport's duplicate is not freed at
// once but retired: whenever a transport is created or closed, the control notices that reached
// retired communicators are read, and a retired communicator is freed once every peer's goodbye,
// its last message, has arrived (ordered matching guarantees that everything the peer sent before
// it has arrived too, so nothing more can come). Data messages still queued there are dropped
// unread with the communicator, so a large send that was never matched is never transferred. A
// peer that never closes keeps the duplicate alive until MPI_Finalize, which costs only memory.
struct Retired {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<bool> gone;  // by rank: goodbye received (this rank counts as gone)
};

std::mutex& retiredMutex() {
  static auto* mutex = new std::mutex;  // leaked: used until process exit
  return *mutex;
}

std::vector<Retired>& retiredComms() {
  static auto* retired = new std::vector<Retired>;
  return *retired;
}

// Reads the control notices of retired communicators and frees those whose peers have all said
// goodbye.
void sweepRetired() noexcept {
  std::lock_guard<std::mutex> lock(retiredMutex());
  auto& retired = retiredComms();
  for (size_t i = 0; i < retired.size();) {
    Retired& entry = retired[i];
    while (true) {
      int flag = 0;
      MPI_Message message;
      MPI_Status status;
      if (MPI_Improbe(MPI_ANY_SOURCE, kControlTag, entry.comm, &flag, &message, &status) !=
              MPI_SUCCESS ||
          !flag) {
        break;
      }
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      std::vector<char> discard(static_cast<size_t>(std::max(count, 1)));
      if (MPI_Mrecv(discard.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        break;
      if (count > 0 && discard[0] == kGoodbyeNotice)
        entry.gone[status.MPI_SOURCE] = true;
    }
    if (std::all_of(entry.gone.begin(), entry.gone.end(), [](bool gone) { return gone; })) {
      MPI_Comm_free(&entry.comm);
      retired[i] = std::move(retired.back());
      retired.pop_back();
    } else {
      ++i;
    }
  }
}

struct ControlSend {
  std::unique_ptr<std::vector<char>> buffer;
  MPI_Request request = MPI_REQUEST_NULL;
};

class MpiTransport final : public TransportCore<Op> {
 public:
  // Takes over `comm`, a duplicate made for this transport.
  MpiTransport(MPI_Comm comm, detail::RankNames names);
  ~MpiTransport() override { close(); }

  std::string_view name() const override { return "mpi"; }

 private:
  void checkTag(uint64_t tag) const override { (void)mpiTagFor(tag); }
  void startSend(Op& op) override;
  void startRecv(Op& op) override;
  void progress() override;
  bool peerLeft(int peer) const override;
  void idle(Deadline deadline, Clock::time_point now, std::unique_lock<std::mutex>& lock) override;
  void onFailure(std::exception_ptr error, bool tellPeers) noexcept override;
  void sayGoodbye() noexcept override;

  int mpiTagFor(uint64_t tag) const;
  void postHeaderRecv(Op& op);
  void onHeader(Op& op, const MPI_Status& status);
  void progressOp(Op& op);
  void bindAnyPeerReceives();
  bool mayProbe(int peer, const Op& any) const;
  void postHeadIfFree(std::vector<Op*>& queue);
  void pollControl();
  void sendNotice(int peer, uint8_t kind, const std::vector<uint8_t>& body) noexcept;
  void drainControlSends(Deadline deadline) noexcept;
  void cancelPending() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int tagUb_ = 32767;
  std::vector<std::optional<Clock::time_point>> goodbyeAt_;  // by rank: when its goodbye came
  // (peer, MPI tag) -> receives, oldest first. A queue that empties stays, with its storage, so a
  // warmed exchange allocates nothing; empty ones are swept once there are kMaxRecvQueues.
  std::map<std::pair<int, int>, std::vector<Op*>> recvQueues_;
  std::vector<ControlSend> controlSends_;
  std::vector<int> unmatchedTags_;  // scratch for bindAnyPeerReceives
  int lastAnyPeer_ = 0;             // the peer a receive from any peer was bound to last
  bool headsHeld_ = false;          // some queue's head may be held (postHeadIfFree)
};

int commRank(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int commSize(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

// A duplicate of `comm`, made with MPI_Comm_idup so that it can give up at `deadline`. A
// non-blocking collective cannot be cancelled, so on timeout the request and the handle it will
// write are left to MPI (leaked), and later collectives on `comm` from this rank are unsafe.
MPI_Comm duplicate(MPI_Comm comm, Deadline deadline) {
  int rank = commRank(comm);
  auto result = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  auto request = std::make_unique<MPI_Request>(MPI_REQUEST_NULL);
  checkMpi(MPI_Comm_idup(comm, result.get(), request.get()), "MPI_Comm_idup", rank);
  while (true) {
    int done = 0;
    checkMpi(MPI_Test(request.get(), &done, MPI_STATUS_IGNORE), "MPI_Test (MPI_Comm_idup)", rank);
    if (done)
      return *result;
    if (deadline.expired()) {
      (void)result.release();
      (void)request.release();
      throw TimeoutError(detail::concat(
          "rank ", rank,
          " (this process): timed out creating the MPI transport: not every member of the MPI "
          "communicator joined MPI_Comm_idup; check that all ranks create the communicator "
          "(raise CHORUS_TIMEOUT if they are only slow)"));
    }
    sched_yield();
  }
}

MpiTransport::MpiTransport(MPI_Comm comm, detail::RankNames names)
    : TransportCore(commRank(comm), commSize(comm), std::move(names)), comm_(comm) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int* tagUb = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tagUb, &flag) == MPI_SUCCESS && flag && tagUb)
    tagUb_ = *tagUb;
  goodbyeAt_.resize(size());
  ops().prepare(kPreparedOps, [](Op& op) {
    op.mpiRequests.reserve(2);  // a header and one chunk
    op.buffer.reserve(sizeof(Header) + kInlineBytes);
  });
}

int MpiTransport::mpiTagFor(uint64_t tag) const {
  if (tag >= kCollectiveTag) {
    CHORUS_CHECK_ARG(tag - kCollectiveTag < kCollectiveMpiTags, "rank ", worldRank(rank()),
                     " (this process): collective tag ", tag, " is beyond the MPI transport's ",
                     kCollectiveMpiTags, " collective tags");
    return kFirstCollectiveMpiTag + static_cast<int>(tag - kCollectiveTag);
  }
  // Note [Two halves of the MPI tags] (core/mpi_tag_halves.h).
  const int64_t mpiTag = detail::mpiTagInHalves(tag, kFirstUserMpiTag, tagUb_);
  CHORUS_CHECK_ARG(mpiTag >= 0, "rank ", worldRank(rank()), " (this process): tag ", tag,
                   " is beyond the MPI transport's tags, which are ",
                   detail::tagsInHalves(kFirstUserMpiTag, tagUb_), " with this MPI (MPI_TAG_UB ",
                   tagUb_, "); use a smaller tag");
  return static_cast<int>(mpiTag);
}

void MpiTransport::startSend(Op& op) {
  op.mpiTag = mpiTagFor(op.tag);
  op.stage = Stage::kPayload;
  op.mpiRequests.clear();
  const size_t bytes = op.bytes;
  const int peer = op.peer;
  bool inlined = bytes <= kInlineBytes;
  Header header{kMagic, 0, bytes, op.tag, op.fingerprint};
  op.buffer.resize(sizeof(Header) + (inlined ? bytes : 0));
  std::memcpy(op.buffer.data(), &header, sizeof(Header));
  if (inlined && bytes > 0)
    std::memcpy(op.buffer.data() + sizeof(Header), op.data, bytes);
  op.mpiRequests.push_back(MPI_REQUEST_NULL);
  checkMpi(MPI_Isend(op.buffer.data(), static_cast<int>(op.buffer.size()), MPI_BYTE, peer,
                     op.mpiTag, comm_, &op.mpiRequests.back()),
           "MPI_Isend", worldRank(rank()), worldRank(peer));
  for (size_t offset = 0; !inlined && offset < bytes; offset += kChunkBytes) {
    int length = static_cast<int>(std::min(kChunkBytes, bytes - offset));
    op.mpiRequests.push_back(MPI_REQUEST_NULL);
    checkMpi(MPI_Isend(op.data + offset, length, MPI_BYTE, peer, op.mpiTag, comm_,
                       &op.mpiRequests.back()),
             "MPI_Isend", worldRank(rank()), worldRank(peer));
  }
}

void MpiTransport::startRecv(Op& op) {
  op.mpiTag = mpiTagFor(op.tag);
  op.stage = Stage::kQueued;
  op.mpiRequests.clear();
  if (recvQueues_.size() >= kMaxRecvQueues)
    std::erase_if(recvQueues_, [](const auto& entry) { return entry.second.empty(); });
  auto& queue = recvQueues_[{op.peer, op.mpiTag}];
  if (queue.capacity() == 0)
    queue.reserve(kQueuedReceives);  // so a receive posted early rarely grows it later
  // A receive from any peer bound here was posted before every receive queued (Note [Receives
  // from any peer over MPI]): it goes first.
  const bool first = !queue.empty() && op.order < queue.front()->order;
  queue.insert(first ? queue.begin() : queue.end(), &op);
  postHeadIfFree(queue);
}

// Posts the header receive of the head of `queue`, unless it is posted already or a receive from
// any peer posted before it still waits for a message with its tag (then it is held).
void MpiTransport::postHeadIfFree(std::vector<Op*>& queue) {
  if (queue.empty() || queue.front()->stage != Stage::kQueued)
    return;
  Op& head = *queue.front();
  for (const Op* any : anyPeerReceives().waiting()) {
    if (any->order < head.order && mpiTagFor(any->tag) == head.mpiTag) {
      headsHeld_ = true;
      return;
    }
  }
  postHeaderRecv(head);
}

void MpiTransport::postHeaderRecv(Op& op) {
  op.stage = Stage::kHeader;
  op.buffer.resize(sizeof(Header) + kInlineBytes);
  op.mpiRequests.assign(1, MPI_REQUEST_NULL);
  checkMpi(MPI_Irecv(op.buffer.data(), static_cast<int>(op.buffer.size()), MPI_BYTE, op.peer,
                     op.mpiTag, comm_, &op.mpiRequests[0]),
           "MPI_Irecv", worldRank(rank()), worldRank(op.peer));
}

// The head receive of (peer, MPI tag) got its header: check it, post the payload, then the next
// head's header (in that order, so MPI matches the payload first).
void MpiTransport::onHeader(Op& op, const MPI_Status& status) {
  int received = 0;
  MPI_Get_count(&status, MPI_BYTE, &received);
  Header header;
  if (static_cast<size_t>(received) < sizeof(Header) ||
      (std::memcpy(&header, op.buffer.data(), sizeof(Header)), header.magic != kMagic)) {
    throw PeerError(detail::concat("rank ", worldRank(rank()),
                                   " (this process): received a malformed message "
                                   "from rank ",
                                   worldRank(op.peer), "; is it running the same chorus version?"),
                    worldRank(op.peer));
  }
  checkMatch(worldRank(rank()), worldRank(op.peer), op.fingerprint, op.bytes, header.fingerprint,
             header.bytes);
  if (header.tag != op.tag) {  // one MPI tag carries one chorus tag, so only a corrupt header
    throw MismatchError(
        detail::concat("rank ", worldRank(rank()), " (this process): expected a message with tag ",
                       op.tag, " from rank ", worldRank(op.peer), " but it sent tag ", header.tag,
                       " (during ", op.fingerprint.describe(), ")"),
        "tag", {worldRank(rank()), worldRank(op.peer)});
  }
  auto& queue = recvQueues_[{op.peer, op.mpiTag}];
  CHORUS_ASSERT(!queue.empty() && queue.front() == &op);
  queue.erase(queue.begin());  // few receives wait on one (peer, tag)
  op.mpiRequests.clear();
  if (op.bytes <= kInlineBytes) {
    CHORUS_ASSERT(static_cast<size_t>(received) == sizeof(Header) + op.bytes);
    if (op.bytes > 0)
      std::memcpy(op.data, op.buffer.data() + sizeof(Header), op.bytes);
    op.complete = true;
  } else {
    op.stage = Stage::kPayload;
    for (size_t offset = 0; offset < op.bytes; offset += kChunkBytes) {
      int length = static_cast<int>(std::min(kChunkBytes, op.bytes - offset));
      op.mpiRequests.push_back(MPI_REQUEST_NULL);
      checkMpi(MPI_Irecv(op.data + offset, length, MPI_BYTE, op.peer, op.mpiTag, comm_,
                         &op.mpiRequests.back()),
               "MPI_Irecv", worldRank(rank()), worldRank(op.peer));
    }
  }
  postHeadIfFree(queue);
}

void MpiTransport::progressOp(Op& op) {
  if (op.complete || op.peer == kAnyPeer)  // a receive from any peer not yet bound: nothing posted
    return;
  if (op.stage == Stage::kHeader) {
    int flag = 0;
    MPI_Status status;
    checkMpi(MPI_Test(&op.mpiRequests[0], &flag, &status), "MPI_Test", worldRank(rank()),
             worldRank(op.peer));
    if (flag)
      onHeader(op, status);
  }
  if (op.stage == Stage::kPayload && !op.complete) {
    int flag = 0;
    checkMpi(MPI_Testall(static_cast<int>(op.mpiRequests.size()), op.mpiRequests.data(), &flag,
                         MPI_STATUSES_IGNORE),
             "MPI_Testall", worldRank(rank()), worldRank(op.peer));
    if (flag)
      op.complete = true;
  }
}

void MpiTransport::progress() {
  pollControl();
  bindAnyPeerReceives();
  // onHeader() may move another op from kQueued to kHeader; it is tested on the next pass.
  for (size_t i = 0; i < ops().active().size(); ++i) progressOp(*ops().active()[i]);
}

// Note [Receives from any peer over MPI]
// A receive from any peer posts nothing to MPI until it is bound. Each pass binds it to a peer
// whose next message on its MPI tag has arrived and is a header that no earlier posted receive of
// that peer can take: MPI_Iprobe asks only peers where no receive on that tag has its header
// posted, none posted before it is queued, and none is taking its payload (whose chunks share the
// tag). It then goes to the front of that peer's queue and starts. Receives naming a peer that
// were posted after a waiting receive from any peer, with its tag, are held (their header receive
// not posted) until that one is bound, so that MPI cannot give them a message it should get. Passes
// go in posting order, and once a receive finds nothing, later ones with its tag wait for the next
// pass. So the earliest posted receive that can take a message gets it (transport.h).
void MpiTransport::bindAnyPeerReceives() {
  auto& any = anyPeerReceives();
  unmatchedTags_.clear();
  for (size_t i = 0; i < any.waiting().size();) {
    Op& op = *any.waiting()[i];
    const int mpiTag = mpiTagFor(op.tag);
    if (std::find(unmatchedTags_.begin(), unmatchedTags_.end(), mpiTag) != unmatchedTags_.end()) {
      ++i;
      continue;
    }
    int from = -1;
    for (int k = 1; k <= size() && from < 0; ++k) {
      const int peer = (lastAnyPeer_ + k) % size();
      if (peer == rank() || !mayProbe(peer, op))
        continue;
      int flag = 0;
      checkMpi(MPI_Iprobe(peer, mpiTag, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe",
               worldRank(rank()), worldRank(peer));
      if (flag)
        from = peer;
    }
    if (from < 0) {
      unmatchedTags_.push_back(mpiTag);
      ++i;
      continue;
    }
    any.remove(&op);
    lastAnyPeer_ = from;
    AnyPeerReceives<Op>::bind(op, from);
    startRecv(op);
  }
  if (headsHeld_) {  // some may be free now
    headsHeld_ = false;
    for (auto& [key, queue] : recvQueues_) postHeadIfFree(queue);
  }
}

bool MpiTransport::mayProbe(int peer, const Op& any) const {
  const int mpiTag = mpiTagFor(any.tag);
  auto queue = recvQueues_.find({peer, mpiTag});
  if (queue != recvQueues_.end() && !queue->second.empty()) {
    const Op& head = *queue->second.front();
    if (head.stage != Stage::kQueued || head.order < any.order)
      return false;
  }
  for (const Op* op : ops().active()) {
    if (!op->isSend && op->peer == peer && op->mpiTag == mpiTag && op->stage == Stage::kPayload &&
        !op->complete)
      return false;
  }
  return true;
}

// Reads every control notice that has arrived: a goodbye marks its sender, an abort fails this
// transport with an error of the type the sender had.
void MpiTransport::pollControl() {
  while (true) {
    int flag = 0;
    MPI_Status status;
    checkMpi(MPI_Iprobe(MPI_ANY_SOURCE, kControlTag, comm_, &flag, &status), "MPI_Iprobe",
             worldRank(rank()));
    if (!flag)
      return;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<uint8_t> notice(static_cast<size_t>(count));
    int peer = status.MPI_SOURCE;
    checkMpi(MPI_Recv(notice.data(), count, MPI_BYTE, peer, kControlTag, comm_, MPI_STATUS_IGNORE),
             "MPI_Recv", worldRank(rank()), worldRank(peer));
    if (!notice.empty() && notice[0] == kGoodbyeNotice) {
      goodbyeAt_[peer] = Clock::now();
      continue;
    }
    std::vector<uint8_t> encoded(notice.begin() + (notice.empty() ? 0 : 1), notice.end());
    fail(decodeAbortNotice(worldRank(rank()), worldRank(peer), encoded), /*tellPeers=*/false);
    rethrowFailure();
  }
}

// A peer that said goodbye a while ago: messages it sent before leaving have landed by now.
bool MpiTransport::peerLeft(int peer) const {
  const auto& goodbye = goodbyeAt_[peer];
  return goodbye && Clock::now() - *goodbye >= kGoodbyeGrace;
}

void MpiTransport::idle(Deadline /*deadline*/,
                        Clock::time_point /*now*/,
                        std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  sched_yield();
  lock.lock();
}

void MpiTransport::sendNotice(int peer, uint8_t kind, const std::vector<uint8_t>& body) noexcept {
  try {
    ControlSend send;
    send.buffer = std::make_unique<std::vector<char>>(body.size() + 1);
    (*send.buffer)[0] = static_cast<char>(kind);
    std::copy(body.begin(), body.end(), send.buffer->begin() + 1);
    if (MPI_Isend(send.buffer->data(), static_cast<int>(send.buffer->size()), MPI_BYTE, peer,
                  kControlTag, comm_, &send.request) == MPI_SUCCESS) {
      controlSends_.push_back(std::move(send));
    }
  } catch (...) {
    // Best effort: the peer then times out instead of failing at once.
  }
}

// Gives the notices until `deadline` to leave; what is left is cancelled and freed, and its
// buffer leaked (MPI may still read it).
void MpiTransport::drainControlSends(Deadline deadline) noexcept {
  while (!controlSends_.empty()) {
    for (size_t i = 0; i < controlSends_.size();) {
      int flag = 0;
      if (MPI_Test(&controlSends_[i].request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
        controlSends_[i] = std::move(controlSends_.back());
        controlSends_.pop_back();
      } else {
        ++i;
      }
    }
    if (deadline.expired())
      break;
    sched_yield();
  }
  for (ControlSend& send : controlSends_) {
    MPI_Cancel(&send.request);
    MPI_Request_free(&send.request);
    (void)send.buffer.release();
  }
  controlSends_.clear();
}

// Drops the requests of `requests` that have finished (or failed).
void dropFinished(std::vector<MPI_Request*>& requests) {
  for (size_t i = 0; i < requests.size();) {
    int flag = 0;
    if (MPI_Test(requests[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
      requests[i] = requests.back();
      requests.pop_back();
    } else {
      ++i;
    }
  }
}

// Cancels the MPI requests of every pending op and forgets the ops. Receives get kCancelTimeout
// to finish cancelling; sends one test (Open MPI cannot cancel them, so waiting is pointless).
// What is left is freed, and its op (whose buffer MPI may still use) deliberately leaked.
void MpiTransport::cancelPending() noexcept {
  std::vector<MPI_Request*> receives, leftover;
  for (Op* op : ops().active()) {
    for (MPI_Request& request : op->mpiRequests) {
      if (request == MPI_REQUEST_NULL)
        continue;
      MPI_Cancel(&request);
      (op->isSend ? leftover : receives).push_back(&request);
    }
  }
  Deadline deadline = Deadline::after(kCancelTimeout);
  while (true) {
    dropFinished(receives);
    if (receives.empty() || deadline.expired())
      break;
    sched_yield();
  }
  dropFinished(leftover);
  leftover.insert(leftover.end(), receives.begin(), receives.end());
  for (MPI_Request* request : leftover) MPI_Request_free(request);
  ops().releaseAll([&leftover](const Op& op) {
    return std::any_of(leftover.begin(), leftover.end(), [&op](MPI_Request* request) {
      return request >= op.mpiRequests.data() &&
             request < op.mpiRequests.data() + op.mpiRequests.size();
    });
  });
  recvQueues_.clear();
}

void MpiTransport::onFailure(std::exception_ptr error, bool tellPeers) noexcept {
  if (comm_ == MPI_COMM_NULL || mpiFinalized())
    return;
  cancelPending();
  if (!tellPeers)
    return;
  std::vector<uint8_t> notice;
  try {
    notice = detail::encodeError(error);
  } catch (...) {
    return;  // the peers then time out
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank() && !goodbyeAt_[peer])
      sendNotice(peer, kAbortNotice, notice);
  }
}

void MpiTransport::sayGoodbye() noexcept {
  if (comm_ == MPI_COMM_NULL || mpiFinalized())
    return;  // too late to talk to MPI; the duplicate went with MPI_Finalize
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank() && !goodbyeAt_[peer])
      sendNotice(peer, kGoodbyeNotice, {});
  }
  drainControlSends(Deadline::after(kGoodbyeTimeout));
  // See Note [Retiring an MPI communicator].
  try {
    Retired entry{comm_, std::vector<bool>(size())};
    for (int peer = 0; peer < size(); ++peer) entry.gone[peer] = peer == rank() || goodbyeAt_[peer];
    std::lock_guard<std::mutex> retiredLock(retiredMutex());
    retiredComms().push_back(std::move(entry));
  } catch (...) {
    // Out of memory: leave the duplicate unfreed.
  }
  comm_ = MPI_COMM_NULL;
  sweepRetired();
}

}  // namespace

std::unique_ptr<Transport> createMpiTransport(MPI_Comm comm,
                                              Deadline deadline,
                                              detail::RankNames names) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || mpiFinalized()) {
    throw UnsupportedError(
        "the MPI transport needs MPI to be initialized (and not finalized); start the program "
        "with mpirun and let chorus's MPI connector initialize MPI, or call MPI_Init_thread first");
  }
  sweepRetired();
  return std::make_unique<MpiTransport>(duplicate(comm, deadline), std::move(names));
}

}  // namespace chorus::transport::mpi
