// GatheredUnits (see gathered_units.h).
#include "parallel/gathered_units.h"

#include <exception>
#include <utility>

#include "parallel/wait_all.h"

namespace chorus::parallel {

// Note [Released units keep their address]
// Stage 3 releases a unit after its module's forward, but the memory did not go with it while
// anything viewed it, and autograd does: forward saves views of the weights it used (F.linear
// saves weight.t()) until backward. With a new buffer per gather, every unit whose views
// autograd kept stayed in memory from forward to backward, and backward's gathers came on top.
// So the release after forward keeps the buffer and returns its pages to the system (madvise
// MADV_DONTNEED): the views stay valid and cost nothing, and the gather before the module's
// backward (chorus.torch's stage-3 hooks run it when the gradient of the module's output arrives,
// before any of the module's backward) writes the unit back at the same address before they are
// read. Torch's FSDP does the same to its flat parameters by resizing their storage to nothing.
// Every other release (in backward, once the unit's gradients are reduced; at step()) gives the
// buffer up instead and leaves its lifetime to the views: something may still read them then, a
// node that used the weight detached, say, which runs after the weight's own gradient is done.
// A first touch of a page costs 1-10 us either way: a new buffer is zeroed, a discarded one is
// faulted back in by the allgather's writes.

GatheredUnits::GatheredUnits(std::vector<size_t> unitBytes, std::shared_ptr<BufferAccount> account)
    : bytes_(std::move(unitBytes)), units_(bytes_.size()), account_(std::move(account)) {}

GatheredUnits::~GatheredUnits() {
  std::vector<std::shared_ptr<Work>> running;
  for (Unit& unit : units_)
    if (unit.work)
      running.push_back(std::move(unit.work));
  try {
    waitAll(running);
  } catch (const std::exception&) {  // already reported, or never asked for
  }
}

std::shared_ptr<AlignedBuffer> GatheredUnits::newBuffer(int unit) {
  auto counted = std::make_shared<std::atomic<bool>>(false);
  units_[unit].counted = counted;
  return std::shared_ptr<AlignedBuffer>(
      new AlignedBuffer(bytes_[unit], "ZeRO: a gathered unit"),
      [account = account_, bytes = bytes_[unit], counted](AlignedBuffer* buffer) {
        if (counted->exchange(false))
          account->remove(bytes);
        delete buffer;
      });
}

void GatheredUnits::gather(int unit, const Start& start) {
  Unit& u = units_.at(unit);
  if (u.gathered)
    return;
  if (!u.buffer)
    u.buffer = newBuffer(unit);
  u.work = start(u.buffer->data());  // if it throws, nothing was issued: the unit stays released
  u.gathered = true;
  if (!u.counted->exchange(true))
    account_->add(bytes_[unit]);
}

std::exception_ptr GatheredUnits::finishWork(int unit) {
  if (auto work = std::move(units_.at(unit).work)) {
    try {
      work->wait();  // the allgather writes into the buffer until it completes
    } catch (...) {
      return std::current_exception();  // it has ended: the unit can be released all the same
    }
  }
  return nullptr;
}

void GatheredUnits::wait(int unit) {
  if (std::exception_ptr failure = finishWork(unit)) {
    release(unit);
    std::rethrow_exception(failure);
  }
}

void GatheredUnits::release(int unit) { releaseAs(unit, /*keepAddress=*/false); }

void GatheredUnits::releaseKeepingAddress(int unit) { releaseAs(unit, /*keepAddress=*/true); }

void GatheredUnits::releaseAs(int unit, bool keepAddress) {
  std::exception_ptr failure = finishWork(unit);
  Unit& u = units_[unit];
  if (u.gathered) {
    u.gathered = false;
    if (keepAddress) {
      u.buffer->discard();
      if (u.counted->exchange(false))
        account_->remove(bytes_[unit]);
    } else {
      u.buffer.reset();  // its deleter takes its bytes off the account once no view holds it
      u.counted.reset();
    }
  }
  if (failure)
    std::rethrow_exception(failure);
}

bool GatheredUnits::isGathered(int unit) const {
  const Unit& u = units_.at(unit);
  return u.gathered && !u.work;
}

}  // namespace chorus::parallel
