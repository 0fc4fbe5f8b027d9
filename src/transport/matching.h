// PeerMatching: the matching of receives to the messages of one peer (Transport contract in
// transport.h): the k-th receive posted for a tag gets the k-th message sent with that tag.
//
// A message that arrives finds the first posted receive with its tag (takeReceive); with none, the
// transport buffers it here (bufferMessage), and a receive posted later takes the first buffered
// message with its tag (findMessage, then removeMessage). How the bytes get there (straight into
// the receive's buffer, or into a buffer of the message's own first) is the transport's business.
//
// Op is the transport's op (a PostedOp); Message is its record of a buffered message, which must
// have `uint64_t tag() const`. Messages have stable addresses until removed, so a transport may
// keep pointing at one while its bytes stream in. Few are pending at a time, so lookups are linear.
// Not thread-safe: the transport's lock guards it.
//
// Removed records are kept (up to kSpareMessages) and handed out again by bufferMessage, so that a
// warmed exchange allocates nothing: a record is reset with its `recycle()` when Message has one
// (which may keep a buffer for the next message), else assigned a fresh Message(). Room for
// kReservedReceives waiting receives is made up front: how many wait at once depends on how the
// ranks are scheduled, so a warmed exchange could otherwise meet a new maximum, and allocate, at
// any time.
//
// AnyPeerReceives holds a transport's receives from any peer (kAnyPeer, transport.h) that no
// message has matched yet. Every PeerMatching of the transport shares it (shareAnyPeerReceives): a
// message goes to the earlier posted (Op::order, op_pool.h) of its peer's first waiting receive
// with its tag and the first waiting receive from any peer with its tag, as in MPI. One from any
// peer is then bound to the message's peer (its op and its Request name that peer).
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <vector>

namespace chorus::transport {

template <typename Op>
class AnyPeerReceives {
 public:
  AnyPeerReceives() { receives_.reserve(4); }

  // A receive from any peer that nothing buffered matched waits here, behind those posted before.
  void add(Op* op) { receives_.push_back(op); }

  // The first waiting receive with `tag`, or null.
  Op* first(uint64_t tag) const {
    auto it = std::find_if(receives_.begin(), receives_.end(),
                           [tag](const Op* op) { return op->tag == tag; });
    return it == receives_.end() ? nullptr : *it;
  }

  // The first waiting receive with `tag`, no longer waiting, and bound to `peer`; null when none.
  Op* take(uint64_t tag, int peer) {
    Op* op = first(tag);
    if (op != nullptr) {
      remove(op);
      bind(*op, peer);
    }
    return op;
  }

  // Binds the receive `op` (posted for any peer) to `peer`, whose message it takes.
  static void bind(Op& op, int peer) {
    op.peer = peer;
    op.request->peer = peer;
  }

  bool empty() const { return receives_.empty(); }
  // The waiting receives, in posting order.
  const std::vector<Op*>& waiting() const { return receives_; }
  // Removes `op` (bound to a peer by the transport itself: the mpi transport's probe).
  void remove(const Op* op) { std::erase(receives_, op); }
  // Forgets them (the transport failed: their buffers are not touched again).
  void clear() { receives_.clear(); }

 private:
  std::vector<Op*> receives_;
};

template <typename Op, typename Message>
class PeerMatching {
 public:
  static constexpr size_t kReservedReceives = 16;

  PeerMatching() { receives_.reserve(kReservedReceives); }

  // Messages of this matching's peer, `peer`, that find no receive of theirs also look in `any`.
  void shareAnyPeerReceives(int peer, AnyPeerReceives<Op>* any) {
    peer_ = peer;
    any_ = any;
  }

  // A receive with nothing buffered for its tag waits here, behind those posted before it.
  void addReceive(Op* op) { receives_.push_back(op); }

  // The receive a message with `tag` goes to, no longer waiting: the earlier posted of this peer's
  // first with `tag` and the first from any peer with `tag` (then bound to this peer); null when
  // none waits.
  Op* takeReceive(uint64_t tag) {
    auto it = std::find_if(receives_.begin(), receives_.end(),
                           [tag](const Op* op) { return op->tag == tag; });
    const Op* any = any_ != nullptr ? any_->first(tag) : nullptr;
    if (it == receives_.end() || (any != nullptr && any->order < (*it)->order))
      return any != nullptr ? any_->take(tag, peer_) : nullptr;
    Op* op = *it;
    receives_.erase(it);
    return op;
  }

  // Makes the kSpareMessages records bufferMessage hands out first, each passed to `prepare` (to
  // give it a buffer): messages that arrive early then need no allocation, even the first time.
  template <typename Prepare>
  void prepareSpares(const Prepare& prepare) {
    while (spare_.size() < kSpareMessages) prepare(spare_.emplace_back());
  }

  // A new, empty record at the end of the buffered messages, for the transport to fill in.
  Message& bufferMessage() {
    if (spare_.empty())
      return messages_.emplace_back();
    // The record removed last (its buffer grew for the latest early message, so a run of messages
    // of one size reuses one grown buffer); moving the node allocates nothing.
    messages_.splice(messages_.end(), spare_, std::prev(spare_.end()));
    Message& message = messages_.back();
    if constexpr (requires { message.recycle(); })
      message.recycle();
    else
      message = Message();
    return message;
  }
  // The message buffered last.
  Message& newestMessage() { return messages_.back(); }

  // The message buffered first, or null.
  const Message* firstMessage() const { return messages_.empty() ? nullptr : &messages_.front(); }
  // The first buffered message with `tag`, or null. It stays buffered until removeMessage.
  Message* findMessage(uint64_t tag) {
    auto it = std::find_if(messages_.begin(), messages_.end(),
                           [tag](const Message& message) { return message.tag() == tag; });
    return it == messages_.end() ? nullptr : &*it;
  }
  void removeMessage(const Message* message) {
    auto it = std::find_if(messages_.begin(), messages_.end(),
                           [message](const Message& held) { return &held == message; });
    if (it == messages_.end())
      return;
    if (spare_.size() < kSpareMessages)
      spare_.splice(spare_.end(), messages_, it);
    else
      messages_.erase(it);
  }

  // Forgets the waiting receives (the transport failed: their buffers are not touched again).
  void dropReceives() { receives_.clear(); }
  // Forgets everything.
  void clear() {
    receives_.clear();
    messages_.clear();
    spare_.clear();
  }

 private:
  static constexpr size_t kSpareMessages = 4;
  int peer_ = -1;
  AnyPeerReceives<Op>* any_ = nullptr;  // shared with the transport's other peers; may be null
  std::vector<Op*> receives_;           // in posting order
  std::list<Message> messages_;         // in arrival order
  std::list<Message> spare_;            // removed records, for bufferMessage to reuse
};

}  // namespace chorus::transport
